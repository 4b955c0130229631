// Int8 matmul with AVX512_VNNI over 16-column panels: vpdpbusd (4 broadcast u8-biased activations × s8 weights) per 16 columns.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "cpu/int8_cpu.h"
#include "cpu/side_prefetch.h"

// GCC 12 reports the intrinsics' own _mm512_undefined_*() pass-through operands as
// uninitialized; they are fully overwritten.
#if !defined(__clang__)  // a gcc-only warning
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#pragma GCC diagnostic ignored "-Wuninitialized"

#define LOOM_VNNI __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512vnni")))

namespace loom::cpu {

namespace {

LOOM_VNNI inline __m512i Broadcast4(const uint8_t* x) {
  int32_t v;
  std::memcpy(&v, x, 4);
  return _mm512_set1_epi32(v);
}

// R activation rows × P panels from panel p0; `cols` valid columns in the last panel. Two
// integer accumulators per (row, panel) (even and odd blocks) shorten the dependency chains;
// integer sums are exact in any order.
template <int R, int P>
LOOM_VNNI inline void Tile(const uint8_t* xu, const float* sx, int64_t kp, const int8_t* wq,
                           const float* sw, const int32_t* wsum, int64_t p0, int cols, float* y,
                           int64_t ldy, SidePrefetch* side) {
  const int64_t panel_bytes = kInt8Panel * kp;
  __m512i a0[R][P], a1[R][P];
  for (int r = 0; r < R; ++r) {
    for (int p = 0; p < P; ++p) a0[r][p] = a1[r][p] = _mm512_setzero_si512();
  }
  for (int64_t t = 0; t < kp / 4; t += 2) {
    __m512i w0[P], w1[P];
    for (int p = 0; p < P; ++p) {
      const int8_t* b = wq + (p0 + p) * panel_bytes + t * 64;
      _mm_prefetch(reinterpret_cast<const char*>(b) + kInt8PrefetchAhead, _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(b) + kInt8PrefetchAhead + 64, _MM_HINT_T0);
      w0[p] = _mm512_loadu_si512(b);
      w1[p] = _mm512_loadu_si512(b + 64);
    }
    if (side != nullptr) side->Next();
    for (int r = 0; r < R; ++r) {
      const __m512i x0 = Broadcast4(xu + r * kp + 4 * t);
      const __m512i x1 = Broadcast4(xu + r * kp + 4 * t + 4);
      for (int p = 0; p < P; ++p) {
        a0[r][p] = _mm512_dpbusd_epi32(a0[r][p], x0, w0[p]);
        a1[r][p] = _mm512_dpbusd_epi32(a1[r][p], x1, w1[p]);
      }
    }
  }
  for (int p = 0; p < P; ++p) {
    const int64_t j = (p0 + p) * kInt8Panel;
    const __m512i corr = _mm512_slli_epi32(_mm512_loadu_si512(wsum + j), 7);  // 128·Σw
    const __m512 w_scale = _mm512_loadu_ps(sw + j);
    for (int r = 0; r < R; ++r) {
      const __m512i sum = _mm512_sub_epi32(_mm512_add_epi32(a0[r][p], a1[r][p]), corr);
      const __m512 scale = _mm512_mul_ps(_mm512_set1_ps(sx[r]), w_scale);
      const __m512 v = _mm512_mul_ps(_mm512_cvtepi32_ps(sum), scale);
      float* out = y + r * ldy + p * kInt8Panel;
      if (p == P - 1 && cols < kInt8Panel) {
        _mm512_mask_storeu_ps(out, static_cast<__mmask16>((1u << cols) - 1), v);
      } else {
        _mm512_storeu_ps(out, v);
      }
    }
  }
}

template <int R>
LOOM_VNNI void Rows(const uint8_t* xu, const float* sx, int64_t kp, const int8_t* wq,
                    const float* sw, const int32_t* wsum, int64_t j0, int64_t j1, float* y,
                    int64_t ldy, SidePrefetch* side) {
  // One row: one panel at a time, so the weights are one sequential stream (4 panels side by
  // side were 4 streams 14 KiB apart): 0.5B shape, int8 + head, 2 threads, Zen 4, 3 interleaved
  // runs: batch 1 63-69 → 70-71 tok/s, about the machine's streaming rate then.
  constexpr int P = R == 1 ? 1 : R == 8 ? 1 : 2;
  const int64_t first = j0 / kInt8Panel, last = (j1 + kInt8Panel - 1) / kInt8Panel;
  int64_t p = first;
  for (; p + P < last || (p + P == last && j1 % kInt8Panel == 0); p += P) {
    Tile<R, P>(xu, sx, kp, wq, sw, wsum, p, 16, y + (p - first) * kInt8Panel, ldy, side);
  }
  for (; p < last; ++p) {
    const int cols = static_cast<int>(std::min<int64_t>(kInt8Panel, j1 - p * kInt8Panel));
    Tile<R, 1>(xu, sx, kp, wq, sw, wsum, p, cols, y + (p - first) * kInt8Panel, ldy, side);
  }
}

}  // namespace

// The rows in groups of 8, then 4, then what is left: each group streams the panels once
// (cpu::MatmulInt8 hands a block with several groups over in column chunks).
LOOM_VNNI void MatmulInt8Vnni(const uint8_t* xu, const float* sx, int64_t n, int64_t k_pad,
                              const int8_t* wq, const float* sw, const int32_t* wsum, int64_t j0,
                              int64_t j1, float* y, int64_t ldy) {
  MatmulInt8VnniSide(xu, sx, n, k_pad, wq, sw, wsum, j0, j1, y, ldy, nullptr);
}

LOOM_VNNI void MatmulInt8VnniSide(const uint8_t* xu, const float* sx, int64_t n, int64_t k_pad,
                                  const int8_t* wq, const float* sw, const int32_t* wsum,
                                  int64_t j0, int64_t j1, float* y, int64_t ldy,
                                  SidePrefetch* side) {
  int64_t r = 0;
  for (; r + 8 <= n; r += 8) {
    Rows<8>(xu + r * k_pad, sx + r, k_pad, wq, sw, wsum, j0, j1, y + r * ldy, ldy, side);
  }
  for (; r + 4 <= n; r += 4) {
    Rows<4>(xu + r * k_pad, sx + r, k_pad, wq, sw, wsum, j0, j1, y + r * ldy, ldy, side);
  }
  const int64_t left = n - r;
  const uint8_t* x = xu + r * k_pad;
  float* yr = y + r * ldy;
  if (left == 3) Rows<3>(x, sx + r, k_pad, wq, sw, wsum, j0, j1, yr, ldy, side);
  if (left == 2) Rows<2>(x, sx + r, k_pad, wq, sw, wsum, j0, j1, yr, ldy, side);
  if (left == 1) Rows<1>(x, sx + r, k_pad, wq, sw, wsum, j0, j1, yr, ldy, side);
}

}  // namespace loom::cpu
