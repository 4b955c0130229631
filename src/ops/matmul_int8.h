// Int8 weights quantized at load (W8A8): per-output-row symmetric weights, activations per row at run time.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "ops/matmul.h"
#include "tensor/tensor.h"

namespace loom {

// W ≈ scale[j] · q[j, :], scale[j] = max|W[j, :]| / 127, q = clamp(rint(W / scale), ±127).
// Stored in 16-row panels, inputs padded to k_pad (layout: cpu/int8_cpu.h); rows past `rows`
// are zero with scale 0.
struct Int8Weight {
  AlignedBuffer<int8_t> q;     // [panels, 16 · k_pad]
  std::vector<float> scale;    // [panels · 16]
  std::vector<int32_t> sum;    // [panels · 16] Σ_k q[j, k] (the kernels' u8 bias correction)
  int64_t rows = 0, cols = 0, k_pad = 0, panels = 0;
  uint64_t bytes() const { return static_cast<uint64_t>(panels * 16) * static_cast<uint64_t>(k_pad + 8); }
  int8_t At(int64_t j, int64_t i) const;  // q[j, i]
};

// From already-quantized values (a pre-quantized checkpoint): q [rows, cols] row-major,
// scale [rows]. `name` for errors.
StatusOr<std::unique_ptr<Int8Weight>> Int8WeightFromRows(const int8_t* q, const float* scale,
                                                         int64_t rows, int64_t cols,
                                                         const std::string& name);

// Quantizes `w` ([rows, cols], F32/F16/BF16; `name` for errors). cols ≤ cpu::kMaxInt8Depth.
StatusOr<std::unique_ptr<Int8Weight>> QuantizeWeightInt8(const Tensor& w, const std::string& name);

// y = x·Ŵᵀ with x quantized per row: x [n, cols] f32, y [n, rows] f32 (overwritten). Each row's
// result depends only on that row (batch invariant), the same bits at every ISA level.
void MatmulInt8(const float* x, int64_t n, const Int8Weight& w, float* y,
                const MatmulEpilogue* epilogue = nullptr);

}  // namespace loom
