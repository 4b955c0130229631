// bitsandbytes 4-bit weights (NF4 NormalFloat or FP4, per-block absmax; QLoRA's base) and their
// matmul: f32 activations, weights dequantized in registers.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "cpu/nf4_cpu.h"
#include "ops/matmul.h"

namespace loom {

// W[j, i] = code[q[j, i]] · absmax[j, i / block] (f32 product, as bitsandbytes' dequantize_4bit
// computes it; code = cpu::Bnb4Code(type)), blocks along each row's inputs. Layout (16-row
// panels): cpu/nf4_cpu.h.
struct Nf4Weight {
  AlignedBuffer<uint8_t> q;   // [panels, 16 · cols / 2] packed code indices
  std::vector<float> absmax;  // [panels, cols / block, 16]
  int64_t rows = 0, cols = 0, panels = 0, block = 64;
  cpu::Bnb4Type type = cpu::Bnb4Type::kNf4;
  // quant_state's dtype: what bitsandbytes' dequantize_4bit returns by default, so what PEFT takes
  // a DoRA norm over (W rounded to it); the matmul always uses the f32 W (bitsandbytes dequantizes
  // to the activations' dtype there).
  DType dequant_dtype = DType::kF32;
  uint64_t bytes() const {
    return static_cast<uint64_t>(panels * 16) *
           static_cast<uint64_t>(cols / 2 + (cols / block) * 4);
  }
  float Absmax(int64_t j, int64_t b) const;
  uint8_t Code(int64_t j, int64_t i) const;  // q[j, i], 0..15
  // W[j, i] as defined above, for merges, tests and error reports.
  float Dequantized(int64_t j, int64_t i) const;
  // W[j, i] rounded to dequant_dtype (round to nearest even) and back: PEFT's DoRA-norm weight.
  float DequantizedAsStored(int64_t j, int64_t i) const;
};

// q [rows, cols] code indices 0..15 row-major; absmax [rows · cols / block] f32, finite, block b
// of row j at j · (cols / block) + b; `block` even and dividing cols. `name` for errors.
StatusOr<std::unique_ptr<Nf4Weight>> Nf4WeightFromRows(
    const uint8_t* q, const float* absmax, int64_t rows, int64_t cols, int64_t block,
    const std::string& name, cpu::Bnb4Type type = cpu::Bnb4Type::kNf4);

// Quantizes `w` ([rows, cols], F32/F16/BF16; `name` for errors) as bitsandbytes' quantize_4bit
// does it on CPU (its default implementation, blocks of `block` along each row; with
// `double_quant` the absmax then as ops/bnb_double_quant.h):
// absmax = max |w| per block, s = clamp(w · (1 / max(absmax, 1e-38)), −1, 1), q = the bucket of s
// among the midpoints of the sorted code (torch.bucketize), mapped back to the code's index;
// dequant_dtype = w's dtype (quant_state.dtype). Bit for bit the checkpoint bitsandbytes writes.
StatusOr<std::unique_ptr<Nf4Weight>> QuantizeWeightBnb4(const Tensor& w, const std::string& name,
                                                        cpu::Bnb4Type type, int64_t block = 64,
                                                        bool double_quant = false);

// y = x·Ŵᵀ: x [n, cols] f32, y [n, rows] f32 (overwritten). Each row's result depends only on that
// row (batch invariant), the same bits at every ISA level.
void MatmulNf4(const float* x, int64_t n, const Nf4Weight& w, float* y,
               const MatmulEpilogue* epilogue = nullptr);

}  // namespace loom
