// Int8 (W8A8) matmul kernels: y = sx[r]·sw[j]·Σ_k xq[r,k]·wq[j,k], exact int32 sums, one function per ISA.
#pragma once

#include <cstdint>

#include "cpu/cpu_features.h"

namespace loom::cpu {

// Largest k the int32 accumulators hold exactly: 255·127·k < 2³¹ (the VNNI kernel sums the
// activations biased to u8).
inline constexpr int64_t kMaxInt8Depth = 65536;

// AVX512_VNNI (vpdpbusd) on top of the kAvx512 level.
bool HasAvx512Vnni();

// Symmetric per-row quantization: s = max|x[r]|/127, xq = clamp(rint(x / s), ±127) (round half
// to even). An all-zero row gets s = 0 and xq = 0. x: [n, k] f32; xq: [n, k]; sx: [n].
void QuantizeRowsInt8(const float* x, int64_t n, int64_t k, int8_t* xq, float* sx);

// y[r, j - j0] (row stride ldy) for j in [j0, j1): xq [n, k], wq [m, k] (row stride k), sw [m]
// weight row scales, wsum [m] Σ_k wq[j, k]. Every ISA returns the same bits: the integer sum is
// exact and y = float(sum) · (sx[r] · sw[j]) in that order.
void MatmulInt8(Isa isa, const int8_t* xq, const float* sx, int64_t n, int64_t k,
                const int8_t* wq, const float* sw, const int32_t* wsum, int64_t j0, int64_t j1,
                float* y, int64_t ldy);

void MatmulInt8Scalar(const int8_t* xq, const float* sx, int64_t n, int64_t k, const int8_t* wq,
                      const float* sw, int64_t j0, int64_t j1, float* y, int64_t ldy);
void MatmulInt8Vnni(const int8_t* xq, const float* sx, int64_t n, int64_t k, const int8_t* wq,
                    const float* sw, const int32_t* wsum, int64_t j0, int64_t j1, float* y,
                    int64_t ldy);

}  // namespace loom::cpu
