// LoRA shrink (all segments of a projection at once) and expand (over a column block): the ops model/ calls, dispatched to the CPU kernels of the active ISA.
#pragma once

#include <cstdint>

#include "tensor/dtype.h"
#include "tensor/tensor.h"

namespace loom {

// One segment's shrink: t [rows, rank] = x [rows, in] · aᵀ, a [rank, in] (f32/f16/bf16).
struct LoraShrinkJob {
  const float* x;
  int64_t rows;
  const Tensor* a;
  float* t;
};

// Runs every job (all of one projection's segments) in one parallel region: bf16 A with `in` a
// multiple of 32 on AMX tiles of 16 rows where the CPU has them, else the f32 FMA kernel in
// tasks of 4 rows. The kernel depends only on the adapter and the projection, and a row's sums
// never depend on the other rows or on how rows are grouped (batch invariance), so decode rows
// and prefill chunks get the same bits.
void LoraShrinkBatch(const LoraShrinkJob* jobs, size_t num_jobs, int64_t in);

// d[r, j - j0] = Σ_k t[r, k] · b_t[k, j] for j in [j0, j1): t [rows, rank] f32, b_t [rank, out]
// of `dtype` (f32/f16/bf16), d [rows, j1 - j0] f32. The same summation order whatever `rows`
// (batch invariance).
void LoraExpandBlock(const float* t, int64_t rows, int rank, DType dtype, const void* b_t,
                     int64_t out, int64_t j0, int64_t j1, float* d);

// y[r, j] += scale · Σ_k t[r, k] · b_t[k, j] for j in [j0, j1), r < rows; y's rows are `ldy`
// apart. The plain-LoRA path of the expand: no scratch, one pass.
void LoraExpandAddBlock(const float* t, int64_t rows, int rank, DType dtype, const void* b_t,
                        int64_t out, int64_t j0, int64_t j1, float scale, float* y, int64_t ldy);

}  // namespace loom
