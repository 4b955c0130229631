// Int8 matmul with AVX512_VNNI: vpdpbusd over activations biased to u8 (x + 128), weights s8.
#include <immintrin.h>

#include <algorithm>

#include "cpu/int8_cpu.h"

#define LOOM_VNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni")))

namespace loom::cpu {

namespace {

// R activation rows × J weight rows, all of k. Each weight vector is loaded once per R rows.
template <int R, int J>
LOOM_VNNI inline void Tile(const int8_t* xq, const float* sx, int64_t k, const int8_t* wq,
                           const float* sw, const int32_t* wsum, int64_t j, int64_t j0, float* y,
                           int64_t ldy) {
  const __m512i bias = _mm512_set1_epi8(static_cast<char>(0x80));
  __m512i acc[R][J];
  for (int r = 0; r < R; ++r) {
    for (int c = 0; c < J; ++c) acc[r][c] = _mm512_setzero_si512();
  }
  const int64_t kfull = k / 64 * 64;
  for (int64_t i = 0; i < kfull; i += 64) {
    __m512i xv[R];
    for (int r = 0; r < R; ++r) xv[r] = _mm512_xor_si512(_mm512_loadu_si512(xq + r * k + i), bias);
    for (int c = 0; c < J; ++c) {
      const __m512i wv = _mm512_loadu_si512(wq + (j + c) * k + i);
      for (int r = 0; r < R; ++r) acc[r][c] = _mm512_dpbusd_epi32(acc[r][c], xv[r], wv);
    }
  }
  if (const int64_t tail = k - kfull; tail > 0) {
    const __mmask64 m = ~uint64_t{0} >> (64 - tail);
    __m512i xv[R];  // masked-off lanes become 0x80 but meet zero weights
    for (int r = 0; r < R; ++r) {
      xv[r] = _mm512_xor_si512(_mm512_maskz_loadu_epi8(m, xq + r * k + kfull), bias);
    }
    for (int c = 0; c < J; ++c) {
      const __m512i wv = _mm512_maskz_loadu_epi8(m, wq + (j + c) * k + kfull);
      for (int r = 0; r < R; ++r) acc[r][c] = _mm512_dpbusd_epi32(acc[r][c], xv[r], wv);
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int c = 0; c < J; ++c) {
      const int64_t biased = _mm512_reduce_add_epi32(acc[r][c]);
      const auto sum = static_cast<int32_t>(biased - 128 * int64_t{wsum[j + c]});
      y[r * ldy + (j + c - j0)] = static_cast<float>(sum) * (sx[r] * sw[j + c]);
    }
  }
}

template <int R>
LOOM_VNNI void Rows(const int8_t* xq, const float* sx, int64_t k, const int8_t* wq,
                    const float* sw, const int32_t* wsum, int64_t j0, int64_t j1, float* y,
                    int64_t ldy) {
  int64_t j = j0;
  for (; j + 4 <= j1; j += 4) Tile<R, 4>(xq, sx, k, wq, sw, wsum, j, j0, y, ldy);
  for (; j < j1; ++j) Tile<R, 1>(xq, sx, k, wq, sw, wsum, j, j0, y, ldy);
}

}  // namespace

LOOM_VNNI void MatmulInt8Vnni(const int8_t* xq, const float* sx, int64_t n, int64_t k,
                              const int8_t* wq, const float* sw, const int32_t* wsum, int64_t j0,
                              int64_t j1, float* y, int64_t ldy) {
  int64_t r = 0;
  for (; r + 4 <= n; r += 4) Rows<4>(xq + r * k, sx + r, k, wq, sw, wsum, j0, j1, y + r * ldy, ldy);
  const int64_t left = n - r;
  const int8_t* x = xq + r * k;
  float* yr = y + r * ldy;
  if (left == 3) Rows<3>(x, sx + r, k, wq, sw, wsum, j0, j1, yr, ldy);
  if (left == 2) Rows<2>(x, sx + r, k, wq, sw, wsum, j0, j1, yr, ldy);
  if (left == 1) Rows<1>(x, sx + r, k, wq, sw, wsum, j0, j1, yr, ldy);
}

}  // namespace loom::cpu
