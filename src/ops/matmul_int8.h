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

// bitsandbytes' f32 constants for 1/127 (int8_vectorwise_dequant) and 1/127² (int8_mm_dequant;
// 6.200124e-05 is what it multiplies by, 1.8e-5 relative above 1/127²).
inline constexpr float kLlmInt8Weight = 7.874015718698502e-3f;
inline constexpr float kLlmInt8Dequant = 6.200124e-05f;

// W ≈ scale[j] · q[j, :], scale[j] = max|W[j, :]| / 127, q = clamp(rint(W / scale), ±127).
// Stored in 16-row panels, inputs padded to k_pad (layout: cpu/int8_cpu.h); rows past `rows`
// are zero with scale 0.
struct Int8Weight {
  AlignedBuffer<int8_t> q;     // [panels, 16 · k_pad]
  std::vector<float> scale;    // [panels · 16]
  std::vector<int32_t> sum;    // [panels · 16] Σ_k q[j, k] (the kernels' u8 bias correction)
  int64_t rows = 0, cols = 0, k_pad = 0, panels = 0;
  // bitsandbytes LLM.int8 semantics (a load_in_8bit checkpoint): scale[j] is SCB[j] (the row's
  // absmax), W[j, i] = q · SCB · kLlmInt8Weight; each activation row is rounded to f16, its
  // elements with |x| ≥ outlier_threshold (when > 0) are left out of the int8 product and
  // multiplied exactly (f32) by the dequantized weight column instead, the rest quantized by
  // 127 / rowmax, and y = acc · (rowmax · SCB) · kLlmInt8Dequant — bitsandbytes' operations in its
  // order (MatmulInt8).
  bool llm_int8 = false;
  float outlier_threshold = 0;
  uint64_t bytes() const { return static_cast<uint64_t>(panels * 16) * static_cast<uint64_t>(k_pad + 8); }
  int8_t At(int64_t j, int64_t i) const;  // q[j, i]
  float Dequantized(int64_t j, int64_t i) const;  // W[j, i] (merges, DoRA norms, outliers)
};

// From already-quantized values (a pre-quantized checkpoint): q [rows, cols] row-major,
// scale [rows]. `name` for errors.
StatusOr<std::unique_ptr<Int8Weight>> Int8WeightFromRows(const int8_t* q, const float* scale,
                                                         int64_t rows, int64_t cols,
                                                         const std::string& name);

// Quantizes `w` ([rows, cols], F32/F16/BF16; `name` for errors). cols ≤ cpu::kMaxInt8Depth.
StatusOr<std::unique_ptr<Int8Weight>> QuantizeWeightInt8(const Tensor& w, const std::string& name);

// y = x·Ŵᵀ with x quantized per row: x [n, cols] f32, y [n, rows] f32 (overwritten). Each row's
// result depends only on that row (batch invariant), the same bits at every ISA level. With
// w.llm_int8 the outliers are a row's own (bitsandbytes takes the union of a call's rows' outlier
// columns, which would make a row depend on the others).
void MatmulInt8(const float* x, int64_t n, const Int8Weight& w, float* y,
                const MatmulEpilogue* epilogue = nullptr);

}  // namespace loom
