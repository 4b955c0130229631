// CPU kernels for the LoRA shrink step t = x·Aᵀ and the expand step d = t·Bᵀ over a column block (B in panels of 16 columns).
#pragma once

#include <cstdint>

#include "cpu/cpu_features.h"
#include "tensor/dtype.h"
#include "tensor/lora_panels.h"

namespace loom::cpu {

// For the vector expand kernels: columns [j0, min(j1, the next panel start)) one by one with
// their fma chain (acc = fma(t, b, acc) in k order; add: y[r·ldy + j] = fma(scale, acc, y),
// else y[r·ldy + j − j0] = acc), so the vectors start on a whole panel. Returns that start.
int64_t LoraExpandHead(const float* t, int64_t rows, int rank, DType dtype, const void* bp,
                       int64_t j0, int64_t j1, bool add, float scale, float* y, int64_t ldy);

// d[r, j − j0] = Σ_k t[r, k] · B[j, k] for r < rows, j in [j0, j1).
// t: [rows, rank] f32; bp: B packed by PackLoraPanels (`out` columns), of `dtype`: rank
// broadcast-FMAs per 8 or 16 outputs, no horizontal reductions (the k = rank dot-product form
// was ~5× slower); d: [rows, j1 − j0] f32. Any j0: columns before the first whole panel run
// the same fma chain one by one.
void LoraExpand(Isa isa, const float* t, int64_t rows, int rank, DType dtype, const void* bp,
                int64_t out, int64_t j0, int64_t j1, float* d);
void LoraExpandScalar(const float* t, int64_t rows, int rank, DType dtype, const void* bp,
                      int64_t out, int64_t j0, int64_t j1, float* d);
void LoraExpandAvx512(const float* t, int64_t rows, int rank, DType dtype, const void* bp,
                      int64_t out, int64_t j0, int64_t j1, float* d);
void LoraExpandAvx2(const float* t, int64_t rows, int rank, DType dtype, const void* bp,
                    int64_t out, int64_t j0, int64_t j1, float* d);

// y[r·ldy + j] += scale · Σ_k t[r, k] · B[j, k] for r < rows, j in [j0, j1): the expand and
// the add in one pass (no scratch), each row summed on its own in k order (batch invariance).
void LoraExpandAdd(Isa isa, const float* t, int64_t rows, int rank, DType dtype, const void* bp,
                   int64_t out, int64_t j0, int64_t j1, float scale, float* y, int64_t ldy);
void LoraExpandAddScalar(const float* t, int64_t rows, int rank, DType dtype, const void* bp,
                         int64_t out, int64_t j0, int64_t j1, float scale, float* y, int64_t ldy);
void LoraExpandAddAvx512(const float* t, int64_t rows, int rank, DType dtype, const void* bp,
                         int64_t out, int64_t j0, int64_t j1, float scale, float* y, int64_t ldy);
void LoraExpandAddAvx2(const float* t, int64_t rows, int rank, DType dtype, const void* bp,
                       int64_t out, int64_t j0, int64_t j1, float scale, float* y, int64_t ldy);

// t[r, k] = Σ_i x[r, i] · a[k, i] for r < rows, k < rank. x: [rows, in] f32; a: [rank, in] of
// `dtype`; t: [rows, rank] f32. Each row's sums are computed on their own in a fixed order (16
// lanes over i at avx512, 8 at avx2, then one fixed tree), whatever `rows` is and however the rows are split into
// calls: a row's result never depends on the others (batch invariance).
void LoraShrink(Isa isa, const float* x, int64_t rows, int64_t in, DType dtype, const void* a,
                int rank, float* t);
void LoraShrinkScalar(const float* x, int64_t rows, int64_t in, DType dtype, const void* a,
                      int rank, float* t);
void LoraShrinkAvx512(const float* x, int64_t rows, int64_t in, DType dtype, const void* a,
                      int rank, float* t);
void LoraShrinkAvx2(const float* x, int64_t rows, int64_t in, DType dtype, const void* a,
                    int rank, float* t);

}  // namespace loom::cpu
