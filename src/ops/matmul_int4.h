// Int4 weights quantized at load (W4A8): group-wise symmetric 4-bit weights with f16 scales, activations int8 per row at run time.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "ops/matmul.h"
#include "tensor/tensor.h"

namespace loom {

// Per group of `group` inputs of a row: d = m / −8 rounded to f16, with m the group's value of
// largest magnitude (sign kept), q = clamp(rint(W / d), −8, 7) — so m itself is exactly −8·d
// and the 16 levels are all used. Layout and padding (16-row panels): cpu/int4_cpu.h.
struct Int4Weight {
  AlignedBuffer<uint8_t> q;       // [panels, 16 · k_pad / 2] packed nibbles
  std::vector<uint16_t> scale;    // [panels, k_pad / group, 16] f16
  int64_t rows = 0, cols = 0, k_pad = 0, panels = 0;
  int group = 128;
  // Asymmetric weights (GPTQ, AWQ checkpoints; empty = symmetric, z = 8): W = d·(u − z), u the
  // stored nibble q + 8, zero points [panels, k_pad / group, 16] in 0..16 (padded groups 0).
  std::vector<uint8_t> zero;
  // Activation-ordered groups (GPTQ desc_act): kernel input k reads x[perm[k]], so each group's
  // inputs are contiguous; inv[i] is input i's kernel position. Empty = identity.
  std::vector<int32_t> perm, inv;
  uint64_t bytes() const {
    return static_cast<uint64_t>(panels * 16) * static_cast<uint64_t>(k_pad / 2 + (k_pad / group) * 2) +
           zero.size() + 8 * perm.size();
  }
  float Scale(int64_t j, int64_t g) const;  // d[j, g], g a kernel group
  // W[j, i] as the kernels see it (d · (u − z)), i an input of the file's order, for tests,
  // merges and error reports.
  float Dequantized(int64_t j, int64_t i) const;
};

// From already-quantized values (a pre-quantized checkpoint): q [rows, cols] row-major in −8..7,
// scale [rows, cols / group] f16 bits; group 32, 64 or 128 dividing cols. `name` for errors.
StatusOr<std::unique_ptr<Int4Weight>> Int4WeightFromRows(const int8_t* q, const uint16_t* scale,
                                                         int64_t rows, int64_t cols, int group,
                                                         const std::string& name);

// Asymmetric, from a GPTQ/AWQ checkpoint: u [rows, cols] in 0..15 with the inputs in kernel
// order (group g = inputs [g·group, (g+1)·group)), scale [rows, cols / group] f16 bits, zero
// [rows, cols / group] in 0..16, perm [cols] a permutation (kernel input k reads x[perm[k]]) or
// empty; group 32, 64 or 128 dividing cols. `name` for errors.
StatusOr<std::unique_ptr<Int4Weight>> Int4WeightAsymmetric(const uint8_t* u, const uint16_t* scale,
                                                           const uint8_t* zero,
                                                           std::vector<int32_t> perm, int64_t rows,
                                                           int64_t cols, int group,
                                                           const std::string& name);

// The group `--quantize int4` with groups of `requested` (32 or 128) gives a projection of `in`
// input features: `requested` where it divides `in`, else the largest of 64 and 32 below it that
// does (compressed-tensors, and so vLLM and `loom quantize`, store whole groups only: a group of
// 128 on a 576-wide SmolLM projection becomes 64), else 0 — no group of 32 fits and the
// projection stays dense. A `requested` other than 32, 64 or 128 gives 0 (callers check it first).
int Int4GroupFor(int64_t in, int requested);

// Quantizes `w` ([rows, cols], F32/F16/BF16; `name` for errors); group 32, 64 or 128 (a last
// group that `cols` does not fill is padded with zeros).
StatusOr<std::unique_ptr<Int4Weight>> QuantizeWeightInt4(const Tensor& w, const std::string& name,
                                                          int group);

// y = x·Ŵᵀ with x quantized to int8 per row: x [n, cols] f32, y [n, rows] f32 (overwritten).
// Each row's result depends only on that row (batch invariant), the same bits at every ISA.
void MatmulInt4(const float* x, int64_t n, const Int4Weight& w, float* y,
                const MatmulEpilogue* epilogue = nullptr);

}  // namespace loom
