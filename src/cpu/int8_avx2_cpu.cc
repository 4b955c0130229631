// Int8 matmul with AVX2 (no VNNI) over 16-column panels: vpmaddubsw(|w|, sign(xq, w)) + vpmaddwd per ymm half (8 columns), never saturating int16.
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "cpu/avx2_broadcast.h"
#include "cpu/int8_cpu.h"

#define LOOM_AVX2 __attribute__((target("avx2,fma")))

namespace loom::cpu {

namespace {

// Four activations (biased u8) broadcast to every 32-bit lane and unbiased to s8 (xu ^ 0x80 =
// xu − 128 for xu in 0..255).
LOOM_AVX2 inline __m256i Broadcast4Signed(const uint8_t* x) {
  return _mm256_xor_si256(Broadcast4(x), _mm256_set1_epi8(static_cast<char>(0x80)));
}

// y[0, c) ← v[0, c): a ragged panel's last columns stay untouched.
LOOM_AVX2 inline void Store(float* out, __m256 lo, __m256 hi, int cols) {
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

// R activation rows × P panels p0 + p·ps (output columns at (p·ps)·16); `cols` valid columns in
// the last panel. A panel block of 64 bytes is two ymm halves (columns 0–7, 8–15), each lane one
// column's 4 inputs.
// Per lane: vpmaddubsw(|w|, sign(xq, w)) gives two int16 sums of |w|·(±xq) = w·xq, each at most
// 2·128·127 = 32512 in magnitude (|w| ≤ 128, |xq| ≤ 127), and vpmaddwd adds them into int32:
// the exact sum, as the scalar reference.
template <int R, int P>
LOOM_AVX2 inline void Tile(const uint8_t* xu, const float* sx, int64_t kp, const int8_t* wq,
                           const float* sw, int64_t p0, int64_t ps, int cols, float* y,
                           int64_t ldy) {
  const int64_t panel_bytes = kInt8Panel * kp;
  const __m256i ones = _mm256_set1_epi16(1);
  __m256i acc[R][P][2];
  for (int r = 0; r < R; ++r) {
    for (int p = 0; p < P; ++p) acc[r][p][0] = acc[r][p][1] = _mm256_setzero_si256();
  }
  for (int64_t t = 0; t < kp / 4; ++t) {
    __m256i xs[R];
    for (int r = 0; r < R; ++r) xs[r] = Broadcast4Signed(xu + r * kp + 4 * t);
    // every row count: see kInt8PrefetchAhead
    for (int p = 0; p < P; ++p) {
      _mm_prefetch(reinterpret_cast<const char*>(wq + (p0 + p * ps) * panel_bytes + t * 64) +
                       kInt8PrefetchAhead,
                   _MM_HINT_T0);
    }
    for (int p = 0; p < P; ++p) {
      for (int h = 0; h < 2; ++h) {
        const __m256i w = _mm256_loadu_si256(
            reinterpret_cast<const __m256i*>(wq + (p0 + p * ps) * panel_bytes + t * 64 + 32 * h));
        const __m256i wa = _mm256_abs_epi8(w);  // −128 → 0x80, read as u8 128
        for (int r = 0; r < R; ++r) {
          const __m256i pairs = _mm256_maddubs_epi16(wa, _mm256_sign_epi8(xs[r], w));
          acc[r][p][h] = _mm256_add_epi32(acc[r][p][h], _mm256_madd_epi16(pairs, ones));
        }
      }
    }
  }
  for (int p = 0; p < P; ++p) {
    const int64_t j = (p0 + p * ps) * kInt8Panel;
    const __m256 w_lo = _mm256_loadu_ps(sw + j), w_hi = _mm256_loadu_ps(sw + j + 8);
    for (int r = 0; r < R; ++r) {
      const __m256 s = _mm256_set1_ps(sx[r]);
      const __m256 lo = _mm256_mul_ps(_mm256_cvtepi32_ps(acc[r][p][0]), _mm256_mul_ps(s, w_lo));
      const __m256 hi = _mm256_mul_ps(_mm256_cvtepi32_ps(acc[r][p][1]), _mm256_mul_ps(s, w_hi));
      Store(y + r * ldy + p * ps * kInt8Panel, lo, hi, p == P - 1 ? cols : kInt8Panel);
    }
  }
}

// One step for one row and one ymm half: acc += vpmaddwd(vpmaddubsw(|w|, sign(x, w)), 1), the add
// in the accumulator's own register (with intrinsics GCC 12 kept half of Tile4Signed's
// accumulators on the stack: a store and a reload per step).
LOOM_AVX2 inline void Step(__m256i& acc, __m256i wa, __m256i w, __m256i x, __m256i ones) {
  const __m256i v = _mm256_madd_epi16(_mm256_maddubs_epi16(wa, _mm256_sign_epi8(x, w)), ones);
  asm("vpaddd %[v], %[acc], %[acc]" : [acc] "+x"(acc) : [v] "x"(v));
}

// Four rows × one panel from activations already unbiased to s8 (xs [4, kp], one copy per row
// group: no xor per step). The loop holds 8 accumulators, 4 activations, w, |w|, the ones and one
// product: the 16 ymm, nothing spilled (Zen 3: 34 vector uops per 4 inputs × 16 columns × 4 rows).
LOOM_AVX2 inline void Tile4Signed(const int8_t* xs, const float* sx, int64_t kp, const int8_t* wq,
                                  const float* sw, int64_t p, int cols, float* y, int64_t ldy) {
  const int8_t* panel = wq + p * kInt8Panel * kp;
  const __m256i ones = _mm256_set1_epi16(1);
  __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;  // rows 0–3, columns 0–7
  __m256i b0 = a0, b1 = a0, b2 = a0, b3 = a0;                       // rows 0–3, columns 8–15
  for (int64_t t = 0; t < kp / 4; ++t) {
    _mm_prefetch(reinterpret_cast<const char*>(panel + t * 64) + kInt8PrefetchAhead, _MM_HINT_T0);
    const __m256i x0 = Broadcast4(xs + 4 * t), x1 = Broadcast4(xs + kp + 4 * t);
    const __m256i x2 = Broadcast4(xs + 2 * kp + 4 * t), x3 = Broadcast4(xs + 3 * kp + 4 * t);
    const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(panel + t * 64));
    const __m256i wa = _mm256_abs_epi8(w);  // −128 → 0x80, read as u8 128
    Step(a0, wa, w, x0, ones);
    Step(a1, wa, w, x1, ones);
    Step(a2, wa, w, x2, ones);
    Step(a3, wa, w, x3, ones);
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(panel + t * 64 + 32));
    const __m256i va = _mm256_abs_epi8(v);
    Step(b0, va, v, x0, ones);
    Step(b1, va, v, x1, ones);
    Step(b2, va, v, x2, ones);
    Step(b3, va, v, x3, ones);
  }
  const int64_t j = p * kInt8Panel;
  const __m256 w_lo = _mm256_loadu_ps(sw + j), w_hi = _mm256_loadu_ps(sw + j + 8);
  const __m256i lo_acc[4] = {a0, a1, a2, a3}, hi_acc[4] = {b0, b1, b2, b3};
  for (int r = 0; r < 4; ++r) {
    const __m256 s = _mm256_set1_ps(sx[r]);
    const __m256 lo = _mm256_mul_ps(_mm256_cvtepi32_ps(lo_acc[r]), _mm256_mul_ps(s, w_lo));
    const __m256 hi = _mm256_mul_ps(_mm256_cvtepi32_ps(hi_acc[r]), _mm256_mul_ps(s, w_hi));
    Store(y + r * ldy, lo, hi, cols);
  }
}

// Four rows over the panels of [j0, j1): the rows unbiased to s8 once into `xs` [4, kp].
LOOM_AVX2 void Rows4(const uint8_t* xu, const float* sx, int64_t kp, const int8_t* wq,
                     const float* sw, int64_t j0, int64_t j1, float* y, int64_t ldy, int8_t* xs) {
  const __m256i bias = _mm256_set1_epi8(static_cast<char>(0x80));
  for (int64_t i = 0; i < 4 * kp; i += 32) {  // kp is a multiple of 32 (int8_cpu.h)
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xu + i));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(xs + i), _mm256_xor_si256(v, bias));
  }
  const int64_t first = j0 / kInt8Panel, last = (j1 + kInt8Panel - 1) / kInt8Panel;
  for (int64_t p = first; p < last; ++p) {
    const int cols = static_cast<int>(std::min<int64_t>(kInt8Panel, j1 - p * kInt8Panel));
    Tile4Signed(xs, sx, kp, wq, sw, p, cols, y + (p - first) * kInt8Panel, ldy);
  }
}

template <int R>
LOOM_AVX2 void Rows(const uint8_t* xu, const float* sx, int64_t kp, const int8_t* wq,
                    const float* sw, int64_t j0, int64_t j1, float* y, int64_t ldy) {
  constexpr int P = R == 1 ? 4 : R == 2 ? 2 : 1;  // at most 8 accumulators of 16 ymm
  const int64_t first = j0 / kInt8Panel, last = (j1 + kInt8Panel - 1) / kInt8Panel;
  int64_t p = first;
  if constexpr (R == 1) {
    // The 4 panels of a tile are i, q + i, 2q + i and 3q + i of the block's full panels: 4
    // sequential streams, not 4 neighbours (see the AVX2 f32 kernel's Streams).
    const int64_t q = (j1 / kInt8Panel - first) / 4;
    for (int64_t i = 0; i < q; ++i) {
      Tile<1, 4>(xu, sx, kp, wq, sw, first + i, q, kInt8Panel, y + i * kInt8Panel, ldy);
    }
    p += 4 * q;
  } else {
    for (; p + P < last || (p + P == last && j1 % kInt8Panel == 0); p += P) {
      Tile<R, P>(xu, sx, kp, wq, sw, p, 1, kInt8Panel, y + (p - first) * kInt8Panel, ldy);
    }
  }
  for (; p < last; ++p) {
    const int cols = static_cast<int>(std::min<int64_t>(kInt8Panel, j1 - p * kInt8Panel));
    Tile<R, 1>(xu, sx, kp, wq, sw, p, 1, cols, y + (p - first) * kInt8Panel, ldy);
  }
}

}  // namespace

LOOM_AVX2 void MatmulInt8Avx2(const uint8_t* xu, const float* sx, int64_t n, int64_t k_pad,
                              const int8_t* wq, const float* sw, const int32_t* wsum, int64_t j0,
                              int64_t j1, float* y, int64_t ldy) {
  (void)wsum;
  int64_t r = 0;
  if (n >= 4) {
    // Rows4 fills it; the thread's own, kept between calls (one call per 128-column chunk of
    // a block: a new[] each time was an allocation per chunk in prefill).
    static thread_local std::vector<int8_t> xs;
    xs.resize(static_cast<size_t>(4 * k_pad));
    for (; r + 4 <= n; r += 4) {
      Rows4(xu + r * k_pad, sx + r, k_pad, wq, sw, j0, j1, y + r * ldy, ldy, xs.data());
    }
  }
  const int64_t left = n - r;
  const uint8_t* x = xu + r * k_pad;
  float* yr = y + r * ldy;
  if (left == 3) Rows<3>(x, sx + r, k_pad, wq, sw, j0, j1, yr, ldy);
  if (left == 2) Rows<2>(x, sx + r, k_pad, wq, sw, j0, j1, yr, ldy);
  if (left == 1) Rows<1>(x, sx + r, k_pad, wq, sw, j0, j1, yr, ldy);
}

}  // namespace loom::cpu
