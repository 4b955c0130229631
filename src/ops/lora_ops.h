// LoRA expand over a column block: the op model/ calls, dispatched to the CPU kernel of the active ISA.
#pragma once

#include <cstdint>

#include "tensor/dtype.h"

namespace loom {

// d[r, j - j0] = Σ_k t[r, k] · b_t[k, j] for j in [j0, j1): t [rows, rank] f32, b_t [rank, out]
// of `dtype` (f32/f16/bf16), d [rows, j1 - j0] f32. The same summation order whatever `rows`
// (batch invariance).
void LoraExpandBlock(const float* t, int64_t rows, int rank, DType dtype, const void* b_t,
                     int64_t out, int64_t j0, int64_t j1, float* d);

}  // namespace loom
