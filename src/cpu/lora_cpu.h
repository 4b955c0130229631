// CPU kernels for the LoRA expand step d = t·Bᵀ over a column block, with B stored transposed.
#pragma once

#include <cstdint>

#include "cpu/cpu_features.h"
#include "tensor/dtype.h"

namespace loom::cpu {

// d[r, j − j0] = Σ_k t[r, k] · bt[k, j] for r < rows, j in [j0, j1).
// t: [rows, rank] f32; bt: [rank, out] of `dtype` (Bᵀ, so a column block is contiguous and
// the product is rank broadcast-FMAs per 16 outputs — no horizontal reductions, which made
// the k = rank dot-product form ~5× slower); d: [rows, j1 − j0] f32.
void LoraExpand(Isa isa, const float* t, int64_t rows, int rank, DType dtype, const void* bt,
                int64_t out, int64_t j0, int64_t j1, float* d);
void LoraExpandScalar(const float* t, int64_t rows, int rank, DType dtype, const void* bt,
                      int64_t out, int64_t j0, int64_t j1, float* d);
void LoraExpandAvx512(const float* t, int64_t rows, int rank, DType dtype, const void* bt,
                      int64_t out, int64_t j0, int64_t j1, float* d);

}  // namespace loom::cpu
