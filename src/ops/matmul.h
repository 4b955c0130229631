// Matmul op: y = x·Wᵀ for f32 activations and a weight in its file dtype, split over cores.
#pragma once

#include <cstdint>

#include "tensor/tensor.h"

namespace loom {

struct MatmulOptions {
  // Batches with at least this many rows and bf16 weights round activations to bf16 and use
  // the bf16 dot-product instruction (2× the multiply rate; compute-bound prefill). Below it,
  // activations stay f32 (memory-bound decode gains nothing from rounding). 0 disables.
  int bf16_dot_min_rows = 16;
};

// Process-wide options (set once at start-up, before the engine runs).
MatmulOptions& GlobalMatmulOptions();

// x: [n, k] f32 contiguous; w: [m, k] (F32/F16/BF16); y: [n, m] f32 (overwritten).
void Matmul(const float* x, int64_t n, const Tensor& w, float* y);

// Single-threaded variant over output columns [j0, j1) (y row stride m) — for callers that
// already run inside a parallel region.
void MatmulColumns(const float* x, int64_t n, const Tensor& w, int64_t j0, int64_t j1, float* y);

}  // namespace loom
