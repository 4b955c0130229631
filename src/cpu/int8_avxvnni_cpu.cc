// Int8 matmul with AVX-VNNI (VEX vpdpbusd on ymm) over 16-column panels: the AVX512_VNNI kernel's arithmetic, one ymm per 8 columns.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "cpu/avx2_broadcast.h"
#include "cpu/int8_cpu.h"

#define LOOM_AVXVNNI __attribute__((target("avx2,fma,avxvnni")))

namespace loom::cpu {

namespace {

LOOM_AVXVNNI inline void Store(float* out, __m256 lo, __m256 hi, int cols) {
  if (cols == kInt8Panel) {
    _mm256_storeu_ps(out, lo);
    _mm256_storeu_ps(out + 8, hi);
    return;
  }
  alignas(32) float tmp[kInt8Panel];
  _mm256_store_ps(tmp, lo);
  _mm256_store_ps(tmp + 8, hi);
  std::memcpy(out, tmp, sizeof(float) * static_cast<size_t>(cols));
}

// R activation rows × P panels from panel p0; `cols` valid columns in the last panel. Each
// 64-byte panel block is two ymm halves (columns 0–7, 8–15); vpdpbusd adds 4 exact u8·s8
// products per column into int32, and 128·Σw removes the activations' bias.
template <int R, int P>
LOOM_AVXVNNI inline void Tile(const uint8_t* xu, const float* sx, int64_t kp, const int8_t* wq,
                              const float* sw, const int32_t* wsum, int64_t p0, int cols,
                              float* y, int64_t ldy) {
  const int64_t panel_bytes = kInt8Panel * kp;
  __m256i acc[R][P][2];
  for (int r = 0; r < R; ++r) {
    for (int p = 0; p < P; ++p) acc[r][p][0] = acc[r][p][1] = _mm256_setzero_si256();
  }
  for (int64_t t = 0; t < kp / 4; ++t) {
    __m256i w[P][2];
    for (int p = 0; p < P; ++p) {
      const int8_t* b = wq + (p0 + p) * panel_bytes + t * 64;
      _mm_prefetch(reinterpret_cast<const char*>(b) + kInt8PrefetchAhead, _MM_HINT_T0);
      w[p][0] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b));
      w[p][1] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 32));
    }
    for (int r = 0; r < R; ++r) {
      const __m256i x = Broadcast4(xu + r * kp + 4 * t);
      for (int p = 0; p < P; ++p) {
        acc[r][p][0] = _mm256_dpbusd_avx_epi32(acc[r][p][0], x, w[p][0]);
        acc[r][p][1] = _mm256_dpbusd_avx_epi32(acc[r][p][1], x, w[p][1]);
      }
    }
  }
  for (int p = 0; p < P; ++p) {
    const int64_t j = (p0 + p) * kInt8Panel;
    __m256i corr[2];
    __m256 w_scale[2];
    for (int h = 0; h < 2; ++h) {
      corr[h] = _mm256_slli_epi32(  // 128·Σw
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wsum + j + 8 * h)), 7);
      w_scale[h] = _mm256_loadu_ps(sw + j + 8 * h);
    }
    for (int r = 0; r < R; ++r) {
      const __m256 s = _mm256_set1_ps(sx[r]);
      __m256 v[2];
      for (int h = 0; h < 2; ++h) {
        const __m256i sum = _mm256_sub_epi32(acc[r][p][h], corr[h]);
        v[h] = _mm256_mul_ps(_mm256_cvtepi32_ps(sum), _mm256_mul_ps(s, w_scale[h]));
      }
      Store(y + r * ldy + p * kInt8Panel, v[0], v[1], p == P - 1 ? cols : kInt8Panel);
    }
  }
}

template <int R>
LOOM_AVXVNNI void Rows(const uint8_t* xu, const float* sx, int64_t kp, const int8_t* wq,
                       const float* sw, const int32_t* wsum, int64_t j0, int64_t j1, float* y,
                       int64_t ldy) {
  constexpr int P = R == 1 ? 4 : R == 2 ? 2 : 1;  // at most 8 accumulators of 16 ymm
  const int64_t first = j0 / kInt8Panel, last = (j1 + kInt8Panel - 1) / kInt8Panel;
  int64_t p = first;
  for (; p + P < last || (p + P == last && j1 % kInt8Panel == 0); p += P) {
    Tile<R, P>(xu, sx, kp, wq, sw, wsum, p, kInt8Panel, y + (p - first) * kInt8Panel, ldy);
  }
  for (; p < last; ++p) {
    const int cols = static_cast<int>(std::min<int64_t>(kInt8Panel, j1 - p * kInt8Panel));
    Tile<R, 1>(xu, sx, kp, wq, sw, wsum, p, cols, y + (p - first) * kInt8Panel, ldy);
  }
}

}  // namespace

LOOM_AVXVNNI void MatmulInt8AvxVnni(const uint8_t* xu, const float* sx, int64_t n, int64_t k_pad,
                                    const int8_t* wq, const float* sw, const int32_t* wsum,
                                    int64_t j0, int64_t j1, float* y, int64_t ldy) {
  int64_t r = 0;
  for (; r + 4 <= n; r += 4) {
    Rows<4>(xu + r * k_pad, sx + r, k_pad, wq, sw, wsum, j0, j1, y + r * ldy, ldy);
  }
  const int64_t left = n - r;
  const uint8_t* x = xu + r * k_pad;
  float* yr = y + r * ldy;
  if (left == 3) Rows<3>(x, sx + r, k_pad, wq, sw, wsum, j0, j1, yr, ldy);
  if (left == 2) Rows<2>(x, sx + r, k_pad, wq, sw, wsum, j0, j1, yr, ldy);
  if (left == 1) Rows<1>(x, sx + r, k_pad, wq, sw, wsum, j0, j1, yr, ldy);
}

}  // namespace loom::cpu
