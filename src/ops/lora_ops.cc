// LoRA expand op: forwards to cpu::LoraExpand at the active ISA level.
#include "ops/lora_ops.h"

#include "cpu/cpu_features.h"
#include "cpu/lora_cpu.h"

namespace loom {

void LoraExpandBlock(const float* t, int64_t rows, int rank, DType dtype, const void* b_t,
                     int64_t out, int64_t j0, int64_t j1, float* d) {
  cpu::LoraExpand(cpu::ActiveIsa(), t, rows, rank, dtype, b_t, out, j0, j1, d);
}

}  // namespace loom
