// Int4 matmul with AVX512_VNNI: nibbles unpacked in registers, vpdpbusd (u8 weights × s8 activations) per 64 elements.
#include <immintrin.h>

#include "cpu/int4_cpu.h"

// GCC 12 reports the intrinsics' own _mm512_undefined_ps() pass-through operands as maybe
// uninitialized; they are fully overwritten.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#define LOOM_VNNI __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512vnni,f16c")))

namespace loom::cpu {

namespace {

// ReduceLanes16's order in registers: a[i] + a[i + 8], then + [i + 4], then (0 + 2) + (1 + 3).
LOOM_VNNI inline float Reduce16(__m512 a) {
  const __m256 s8 = _mm256_add_ps(_mm512_castps512_ps256(a), _mm512_extractf32x8_ps(a, 1));
  const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
  const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));  // [0] = s4[0] + s4[2], [1] = s4[1] + s4[3]
  return _mm_cvtss_f32(_mm_add_ss(s2, _mm_movehdup_ps(s2)));
}

// R activation rows × J weight rows, all of k_pad; the unpacked weights and their scales are
// built once per R rows. Lane arithmetic follows MatmulInt4's contract (int4_cpu.h) exactly.
template <int R, int J, int G>
LOOM_VNNI inline void Tile(const int8_t* xq, const int32_t* corr, const float* sx, int64_t kp,
                           const uint8_t* wq, const uint16_t* wd, int64_t j, int64_t j0, float* y,
                           int64_t ldy) {
  const int64_t chunks = kp / kInt4Chunk, groups = kp / G;
  const __m512i nib = _mm512_set1_epi8(0x0F);
  const __m512i idx_lo = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
  const __m512i idx_hi = _mm512_set_epi32(3, 3, 3, 3, 3, 3, 3, 3, 2, 2, 2, 2, 2, 2, 2, 2);
  __m512 acc[R][J];
  for (int r = 0; r < R; ++r) {
    for (int q = 0; q < J; ++q) acc[r][q] = _mm512_setzero_ps();
  }
  for (int64_t c = 0; c < chunks; ++c) {
    __m512i xl[R], xh[R], cl[R], ch[R];
    for (int r = 0; r < R; ++r) {
      xl[r] = _mm512_loadu_si512(xq + r * kp + c * kInt4Chunk);
      xh[r] = _mm512_loadu_si512(xq + r * kp + c * kInt4Chunk + 64);
      cl[r] = _mm512_loadu_si512(corr + r * (kp / 4) + c * 32);
      ch[r] = _mm512_loadu_si512(corr + r * (kp / 4) + c * 32 + 16);
      if constexpr (G == 128) cl[r] = _mm512_add_epi32(cl[r], ch[r]);  // one group: sums add
    }
    for (int q = 0; q < J; ++q) {
      const __m512i raw = _mm512_loadu_si512(wq + (j + q) * (kp / 2) + c * 64);
      const __m512i wl = _mm512_and_si512(raw, nib);
      const __m512i wh = _mm512_and_si512(_mm512_srli_epi16(raw, 4), nib);
      const uint16_t* d = wd + (j + q) * groups;
      if constexpr (G == 128) {
        const __m512 dc = _mm512_set1_ps(_cvtsh_ss(d[c]));
        for (int r = 0; r < R; ++r) {
          __m512i t = _mm512_dpbusd_epi32(cl[r], wl, xl[r]);
          t = _mm512_dpbusd_epi32(t, wh, xh[r]);
          acc[r][q] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(t), dc, acc[r][q]);
        }
      } else {
        const __m512 d4 = _mm512_castps128_ps512(
            _mm_cvtph_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(d + c * 4))));
        const __m512 dl = _mm512_permutexvar_ps(idx_lo, d4);
        const __m512 dh = _mm512_permutexvar_ps(idx_hi, d4);
        for (int r = 0; r < R; ++r) {
          const __m512i tl = _mm512_dpbusd_epi32(cl[r], wl, xl[r]);
          acc[r][q] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(tl), dl, acc[r][q]);
          const __m512i th = _mm512_dpbusd_epi32(ch[r], wh, xh[r]);
          acc[r][q] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(th), dh, acc[r][q]);
        }
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int q = 0; q < J; ++q) y[r * ldy + (j + q - j0)] = Reduce16(acc[r][q]) * sx[r];
  }
}

template <int R, int G>
LOOM_VNNI void Rows(const int8_t* xq, const int32_t* corr, const float* sx, int64_t kp,
                    const uint8_t* wq, const uint16_t* wd, int64_t j0, int64_t j1, float* y,
                    int64_t ldy) {
  constexpr int J = R <= 2 ? 4 : 2;
  int64_t j = j0;
  for (; j + J <= j1; j += J) Tile<R, J, G>(xq, corr, sx, kp, wq, wd, j, j0, y, ldy);
  for (; j < j1; ++j) Tile<R, 1, G>(xq, corr, sx, kp, wq, wd, j, j0, y, ldy);
}

template <int G>
LOOM_VNNI void AllRows(const int8_t* xq, const int32_t* corr, const float* sx, int64_t n,
                       int64_t kp, const uint8_t* wq, const uint16_t* wd, int64_t j0, int64_t j1,
                       float* y, int64_t ldy) {
  const int64_t cs = kp / 4;
  int64_t r = 0;
  for (; r + 4 <= n; r += 4) {
    Rows<4, G>(xq + r * kp, corr + r * cs, sx + r, kp, wq, wd, j0, j1, y + r * ldy, ldy);
  }
  const int64_t left = n - r;
  const int8_t* x = xq + r * kp;
  const int32_t* cr = corr + r * cs;
  float* yr = y + r * ldy;
  if (left == 3) Rows<3, G>(x, cr, sx + r, kp, wq, wd, j0, j1, yr, ldy);
  if (left == 2) Rows<2, G>(x, cr, sx + r, kp, wq, wd, j0, j1, yr, ldy);
  if (left == 1) Rows<1, G>(x, cr, sx + r, kp, wq, wd, j0, j1, yr, ldy);
}

}  // namespace

LOOM_VNNI void MatmulInt4Vnni(const int8_t* xq, const int32_t* corr, const float* sx, int64_t n,
                              int64_t k_pad, const uint8_t* wq, const uint16_t* wd, int group,
                              int64_t j0, int64_t j1, float* y, int64_t ldy) {
  if (group == 128) {
    AllRows<128>(xq, corr, sx, n, k_pad, wq, wd, j0, j1, y, ldy);
  } else {
    AllRows<32>(xq, corr, sx, n, k_pad, wq, wd, j0, j1, y, ldy);
  }
}

}  // namespace loom::cpu
