// Matmul op: y = x·Wᵀ for f32 activations and a weight in its file dtype, split over cores.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "cpu/side_prefetch.h"
#include "tensor/tensor.h"

namespace loom {

struct MatmulOptions {
  // Batches with at least this many rows and bf16 weights use the AVX512_BF16 dot-product
  // instruction (compute-bound prefill). Below it, activations stay f32 and weights are
  // widened in registers (memory-bound decode gains nothing from the dot product). 0 = never.
  int bf16_dot_min_rows = 16;
  // false (default, the serving path): activations rounded once to bf16 (relative error ≤ 2⁻⁹
  // per element, as transformers and vLLM running in bf16 compute). true (`--exact-bf16`, the
  // golden tests): activations enter the dot product as hi + lo bf16 pairs (error ~2⁻¹⁷
  // relative, within the f32 golden tolerance) at half the multiply rate.
  bool bf16_split = false;
  // Batch invariance: the kernel (and so each output's summation order) never depends on how
  // many rows are in the call, so a row's result is bit-identical whatever else is batched
  // with it. bf16 weights then use one bf16 kernel for every row count: AMX tiles where the CPU
  // has AMX-BF16 (a lone decode row is padded into a 16-row tile: decode stays memory-bound,
  // prefill keeps AMX speed), else the AVX512_BF16 dot product.
  bool batch_invariant = false;
};

// Process-wide options (set once at start-up, before the engine runs).
MatmulOptions& GlobalMatmulOptions();

// One line naming the active ISA level and the bf16 activation rounding, for start-up and
// benchmark output, e.g. "isa avx512bf16 (bf16 activations rounded once)".
std::string MatmulKernelsDescription();

// Work fused into a matmul's parallel region, so a projection's LoRA costs no fork-join of its
// own. `block` is called for each block of output columns [j0, j1) right after the block is
// computed, on the thread that computed it (LoRA expand, DoRA, bias, while the block is hot in
// cache). `pre` runs `pre_tasks` tasks that every `block` call depends on (the LoRA shrink):
// they are the region's first tasks, so every one of them is claimed (by a running thread, or
// run inline first) before any column block starts, and a block's `block` call waits for them
// all — never for a task nobody runs. Either part may be empty.
struct MatmulEpilogue {
  int64_t pre_tasks = 0;
  std::function<void(int64_t task)> pre;
  std::function<void(int64_t j0, int64_t j1)> block;
  // Optional: the memory block(j0, j1) will read, for a kernel that can prefetch it while it
  // computes the block (the int8 and int4 AVX512_VNNI kernels, the int4 AVX2 one at several
  // rows; cpu/side_prefetch.h).
  std::function<void(int64_t j0, int64_t j1, cpu::SidePrefetch* side)> prefetch;
};

// A bf16 weight [rows, cols] repacked as AMX tiles (cpu::PackWeightAmx): each tile load reads
// one contiguous KiB instead of 16 row pieces cols·2 bytes apart. bf16 prefill on the AMX path,
// 0.5B shape, 2 threads, Emerald Rapids: pp128 +12-15 % (docs/PERFORMANCE.md); decode unchanged.
struct AmxPackedWeight {
  int64_t rows = 0, cols = 0;
  AlignedBuffer<uint16_t> panels;  // [ceil(rows / 16) panels][cols / 32 tiles][16][32]
  uint64_t bytes() const { return panels.size() * sizeof(uint16_t); }
};

// Whether PackWeightForAmx applies to w here: bf16, cols a multiple of 32, an AMX CPU.
bool AmxPackable(const Tensor& w);
// The packed copy of w (over the pool); ResourceExhausted naming `name` if it cannot be
// allocated. release_source: w's file pages are let go as they are packed (ReleaseMappedPages:
// heap memory is left alone; a later read maps them again from the page cache).
StatusOr<std::unique_ptr<AmxPackedWeight>> PackWeightForAmx(const Tensor& w,
                                                            const std::string& name,
                                                            bool release_source = false);

// x: [n, k] f32 contiguous; w: [m, k] (F32/F16/BF16); y: [n, m] f32 (overwritten). `amx`, if
// given, is w packed by PackWeightForAmx: the AMX path reads it instead (same bits); the other
// paths read w.
void Matmul(const float* x, int64_t n, const Tensor& w, float* y,
            const MatmulEpilogue* epilogue = nullptr, const AmxPackedWeight* amx = nullptr);

// Whether MatmulSiluMul applies to these two projections at n rows: both packed for AMX, the
// same shape with rows a multiple of 16, and Matmul would run each of them on AMX.
bool SiluMulFusable(const Tensor& gate, const AmxPackedWeight* gate_amx, const Tensor& up,
                    const AmxPackedWeight* up_amx, int64_t n);
// y [n, m] = SiLU(x·gateᵀ) ⊙ (x·upᵀ) in one pass (x [n, k]): the bits of Matmul with each, then
// SiluMulInPlace, without writing gate and up out (where SiluMulFusable holds).
void MatmulSiluMul(const float* x, int64_t n, const AmxPackedWeight& gate,
                   const AmxPackedWeight& up, float* y);

// One projection of MatmulShared: y [n, w.dim(0)] = x·wᵀ (+ bias [w.dim(0)] when not null).
struct MatmulPart {
  const Tensor* w = nullptr;
  const AmxPackedWeight* amx = nullptr;  // w packed by PackWeightForAmx
  const float* bias = nullptr;
  float* y = nullptr;
};
// Whether MatmulShared applies: every part packed for AMX, the same inputs, and Matmul would run
// each on AMX at n rows.
bool MatmulSharedFusable(const std::vector<MatmulPart>& parts, int64_t n);
// Several projections of the same x (q, k and v) with one activation packing and one parallel
// region: each y gets the bits Matmul (then the bias add of Linear's epilogue) gives it.
void MatmulShared(const float* x, int64_t n, const std::vector<MatmulPart>& parts);

// Single-threaded: y[i, j] = x[i]·w[j] for columns [j0, j1), written at y[i * ldy + j − j0].
// For callers already inside a parallel region.
void MatmulColumns(const float* x, int64_t n, const Tensor& w, int64_t j0, int64_t j1, float* y,
                   int64_t ldy);

}  // namespace loom
