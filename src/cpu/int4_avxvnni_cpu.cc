// Int4 matmul with AVX-VNNI (VEX vpdpbusd on ymm) over 16-column panels: the AVX512_VNNI kernel's arithmetic, nibbles unpacked in registers, one ymm per 8 columns.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "cpu/avx2_broadcast.h"
#include "cpu/int4_cpu.h"

#define LOOM_AVXVNNI __attribute__((target("avx2,fma,f16c,avxvnni")))

namespace loom::cpu {

namespace {

LOOM_AVXVNNI inline void Store(float* out, __m256 lo, __m256 hi, int cols) {
  if (cols == kInt4Panel) {
    _mm256_storeu_ps(out, lo);
    _mm256_storeu_ps(out + 8, hi);
    return;
  }
  alignas(32) float tmp[kInt4Panel];
  _mm256_store_ps(tmp, lo);
  _mm256_store_ps(tmp + 8, hi);
  std::memcpy(out, tmp, sizeof(float) * static_cast<size_t>(cols));
}

// R activation rows × P panels (16 columns each, two ymm halves) starting at panel p0; `cols`
// valid columns in the last panel. Per lane (one column, 4 inputs) and block, vpdpbusd adds the
// low and the high nibbles' 4 exact (q + 8)·x products into int32. The arithmetic per (row,
// column) is MatmulInt4's contract (int4_cpu.h).
template <int R, int P, int G>
LOOM_AVXVNNI inline void Tile(const int8_t* xq, const float* sx, const int32_t* corr, int64_t kp,
                              const uint8_t* wq, const uint16_t* wd, int64_t p0, int64_t ps,
                              int cols, float* y, int64_t ldy) {
  const int64_t groups = kp / G, panel_bytes = kInt4Panel * kp / 2;
  const __m256i nib = _mm256_set1_epi8(0x0F);
  __m256 acc[R][P][2];
  for (int r = 0; r < R; ++r) {
    for (int p = 0; p < P; ++p) acc[r][p][0] = acc[r][p][1] = _mm256_setzero_ps();
  }
  for (int64_t g = 0; g < groups; ++g) {
    __m256i sum[R][P][2];
    for (int r = 0; r < R; ++r) {
      const __m256i c = _mm256_set1_epi32(corr[r * groups + g]);
      for (int p = 0; p < P; ++p) sum[r][p][0] = sum[r][p][1] = c;
    }
    for (int64_t t = g * G / 8; t < (g + 1) * G / 8; ++t) {
      // every row count: see kInt4PrefetchAhead
      for (int p = 0; p < P; ++p) {
        _mm_prefetch(reinterpret_cast<const char*>(wq + (p0 + p * ps) * panel_bytes + t * 64) +
                         kInt4PrefetchAhead,
                     _MM_HINT_T0);
      }
      __m256i xl[R], xh[R];
      for (int r = 0; r < R; ++r) {
        xl[r] = Broadcast4(xq + r * kp + 8 * t);
        xh[r] = Broadcast4(xq + r * kp + 8 * t + 4);
      }
      for (int p = 0; p < P; ++p) {
        for (int h = 0; h < 2; ++h) {
          const __m256i raw = _mm256_loadu_si256(
              reinterpret_cast<const __m256i*>(wq + (p0 + p * ps) * panel_bytes + t * 64 + 32 * h));
          const __m256i wl = _mm256_and_si256(raw, nib);
          const __m256i wh = _mm256_and_si256(_mm256_srli_epi16(raw, 4), nib);
          for (int r = 0; r < R; ++r) {
            sum[r][p][h] = _mm256_dpbusd_avx_epi32(sum[r][p][h], wl, xl[r]);
            sum[r][p][h] = _mm256_dpbusd_avx_epi32(sum[r][p][h], wh, xh[r]);
          }
        }
      }
    }
    for (int p = 0; p < P; ++p) {
      for (int h = 0; h < 2; ++h) {
        const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(
            wd + ((p0 + p * ps) * groups + g) * kInt4Panel + 8 * h)));
        for (int r = 0; r < R; ++r) {
          acc[r][p][h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum[r][p][h]), d, acc[r][p][h]);
        }
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    const __m256 s = _mm256_set1_ps(sx[r]);
    for (int p = 0; p < P; ++p) {
      Store(y + r * ldy + p * ps * kInt4Panel, _mm256_mul_ps(acc[r][p][0], s),
            _mm256_mul_ps(acc[r][p][1], s), p == P - 1 ? cols : kInt4Panel);
    }
  }
}

template <int R, int G>
LOOM_AVXVNNI void Rows(const int8_t* xq, const float* sx, const int32_t* corr, int64_t kp,
                    const uint8_t* wq, const uint16_t* wd, int64_t j0, int64_t j1, float* y,
                    int64_t ldy) {
  constexpr int P = R == 1 ? 2 : 1;  // int32 and f32 accumulators: at most 12 of 16 ymm
  const int64_t first = j0 / kInt4Panel, last = (j1 + kInt4Panel - 1) / kInt4Panel;
  int64_t p = first;
  if constexpr (P == 2) {  // panels i and h + i: two sequential streams, as the AVX2 kernel
    const int64_t h = (j1 / kInt4Panel - first) / 2;
    for (int64_t i = 0; i < h; ++i) {
      Tile<R, 2, G>(xq, sx, corr, kp, wq, wd, first + i, h, kInt4Panel, y + i * kInt4Panel, ldy);
    }
    p += 2 * h;
  }
  for (; p < last; ++p) {
    const int cols = static_cast<int>(std::min<int64_t>(kInt4Panel, j1 - p * kInt4Panel));
    Tile<R, 1, G>(xq, sx, corr, kp, wq, wd, p, 1, cols, y + (p - first) * kInt4Panel, ldy);
  }
}

template <int G>
LOOM_AVXVNNI void AllRows(const int8_t* xq, const float* sx, const int32_t* corr, int64_t n,
                       int64_t kp, const uint8_t* wq, const uint16_t* wd, int64_t j0, int64_t j1,
                       float* y, int64_t ldy) {
  const int64_t cs = kp / G;
  int64_t r = 0;
  for (; r + 3 <= n; r += 3) {
    Rows<3, G>(xq + r * kp, sx + r, corr + r * cs, kp, wq, wd, j0, j1, y + r * ldy, ldy);
  }
  const int64_t left = n - r;
  const int8_t* x = xq + r * kp;
  const int32_t* cr = corr + r * cs;
  float* yr = y + r * ldy;
  if (left == 2) Rows<2, G>(x, sx + r, cr, kp, wq, wd, j0, j1, yr, ldy);
  if (left == 1) Rows<1, G>(x, sx + r, cr, kp, wq, wd, j0, j1, yr, ldy);
}

}  // namespace

LOOM_AVXVNNI void MatmulInt4AvxVnni(const int8_t* xq, const float* sx, const int32_t* corr, int64_t n,
                              int64_t k_pad, const uint8_t* wq, const uint16_t* wd, int group,
                              int64_t j0, int64_t j1, float* y, int64_t ldy) {
  if (auto* f = PickInt4Group(group, &AllRows<32>, &AllRows<64>, &AllRows<128>)) {
    return f(xq, sx, corr, n, k_pad, wq, wd, j0, j1, y, ldy);
  }
  MatmulInt4Scalar(xq, sx, corr, n, k_pad, wq, wd, group, j0, j1, y, ldy);
}

}  // namespace loom::cpu
