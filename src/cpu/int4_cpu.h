// Int4 (W4A8) group-wise matmul kernels: exact int32 sums per 4-element lane, f32 accumulation in a fixed 16-lane order, one function per ISA.
#pragma once

#include <cstdint>

#include "cpu/cpu_features.h"

namespace loom::cpu {

// Weights are packed per row in chunks of 128: 64 bytes, byte b holding element b in its low
// nibble and element b + 64 in its high nibble, each as q + 8 (q in −8..7). Rows are padded with
// q = 0 to a multiple of kInt4Chunk (k_pad); padded activations are 0, so padding adds nothing.
inline constexpr int64_t kInt4Chunk = 128;

// q: [k_pad] values in −8..7 (k_pad a multiple of kInt4Chunk); out: [k_pad / 2] bytes.
void PackInt4(const int8_t* q, int64_t k_pad, uint8_t* out);
// Element i (−8..7) of a packed row.
int8_t UnpackInt4(const uint8_t* packed, int64_t i);

// The nibble offset's correction, per activation row and 4-element lane: corr[r, i] =
// −8·Σ_{e<4} xq[r, 4i + e]. xq: [n, k_pad]; corr: [n, k_pad / 4].
void Int4Corrections(const int8_t* xq, int64_t n, int64_t k_pad, int32_t* corr);

// Sums 16 lanes in the one order every kernel uses: halves, quarters, pairs.
inline float ReduceLanes16(const float* a) {
  float s8[8], s4[4];
  for (int i = 0; i < 8; ++i) s8[i] = a[i] + a[i + 8];
  for (int i = 0; i < 4; ++i) s4[i] = s8[i] + s8[i + 4];
  return (s4[0] + s4[2]) + (s4[1] + s4[3]);
}

// y[r, j − j0] (row stride ldy) for j in [j0, j1), group ∈ {32, 128}:
//   xq [n, k_pad] int8 activations with row scales sx [n] and corrections corr [n, k_pad / 4];
//   wq [m, k_pad / 2] packed weights; wd [m, k_pad / group] f16 group scales.
// Every ISA returns the same bits. Per 128-chunk c and half h (64 elements), lane l (0..15)
// covers elements 128c + 64h + 4l .. +3; its exact int32 sum t = corr + Σ (q + 8)·x is
// accumulated as acc[l] = fma(float(t), d, acc[l]) with d the lane's group scale (group 128:
// both halves' sums first added as integers, one fma per chunk), h = 0 before h = 1, chunks in
// order; y = ReduceLanes16(acc) · sx[r].
void MatmulInt4(Isa isa, const int8_t* xq, const int32_t* corr, const float* sx, int64_t n,
                int64_t k_pad, const uint8_t* wq, const uint16_t* wd, int group, int64_t j0,
                int64_t j1, float* y, int64_t ldy);

void MatmulInt4Scalar(const int8_t* xq, const int32_t* corr, const float* sx, int64_t n,
                      int64_t k_pad, const uint8_t* wq, const uint16_t* wd, int group, int64_t j0,
                      int64_t j1, float* y, int64_t ldy);
void MatmulInt4Vnni(const int8_t* xq, const int32_t* corr, const float* sx, int64_t n,
                    int64_t k_pad, const uint8_t* wq, const uint16_t* wd, int group, int64_t j0,
                    int64_t j1, float* y, int64_t ldy);

}  // namespace loom::cpu
