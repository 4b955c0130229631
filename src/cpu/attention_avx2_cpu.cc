// Attention kernels at the avx2 level: 8-lane key dot products, exp and V accumulation, for the
// query heads of one KV head at once.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "cpu/attention_cpu.h"
#include "cpu/avx2_reduce.h"
#include "cpu/avx2_widen.h"
#include "cpu/exp_poly.h"

#define LOOM_AVX2 __attribute__((target("avx2,fma")))
// Loops over the accumulator arrays' indices, unrolled before GCC 12's scalar replacement of
// aggregates: with such a loop left rolled there, the whole array lived on the stack, stored
// every step beside its registers (the V pass wrote its 8 accumulators back every position).
// With it and the V rows walked a block at a time: 1.15× (one head) to 1.75× (four) on
// loom_attention_bench, Zen 3.
#define LOOM_UNROLL _Pragma("GCC unroll 16")

namespace loom::cpu {

namespace {

// exp(x) for x ≤ 0 (softmax after subtracting the max), 8 lanes: the AVX-512 kernel's Cephes
// polynomial (≤ 2 ulp), x = n·ln2 + r; 2ⁿ built in the exponent bits (n ≥ −126 here, so 2ⁿ is
// normal). Lanes below −87.3 give 0.
LOOM_AVX2 inline __m256 ExpNonPositive(__m256 x) {
  namespace e = exp_poly;
  const __m256 lo = _mm256_set1_ps(e::kMinInput);
  const __m256 keep = _mm256_cmp_ps(x, lo, _CMP_GE_OQ);
  x = _mm256_max_ps(x, lo);
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(e::kLog2e)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(e::kLn2Hi), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(e::kLn2Lo), r);
  __m256 p = _mm256_set1_ps(e::kP[0]);
  for (int i = 1; i < 6; ++i) p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(e::kP[i]));
  p = _mm256_fmadd_ps(_mm256_mul_ps(p, r), r, _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  const __m256i two_n =
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_and_ps(_mm256_mul_ps(p, _mm256_castsi256_ps(two_n)), keep);
}

// 8 cache elements as f32 (bf16 widened exactly: its bits are the f32's high half).
LOOM_AVX2 inline __m256 Load8(const float* p) { return _mm256_loadu_ps(p); }
LOOM_AVX2 inline __m256 Load8(const uint16_t* p) { return Bf16x8ToF32(p); }

// 16 bf16 values at p (32 bytes) as two 8-lane f32 vectors: even = elements 0, 2, .., 14 (shifted
// up), odd = 1, 3, .., 15 (masked): one ALU µop per 8 lanes instead of Bf16x8ToF32's two.
LOOM_AVX2 inline void WidenBf16Pairs(const uint16_t* p, __m256& even, __m256& odd) {
  const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  even = _mm256_castsi256_ps(_mm256_slli_epi32(x, 16));
  odd = _mm256_castsi256_ps(_mm256_and_si256(x, _mm256_set1_epi32(~0xffff)));
}

// Raw scores of H heads (head h's query at q + h·q_stride) over B blocks from p0 (a multiple of
// 16), each as two 8-lane halves: lane j of acc[h][b][half] = Σ_d q_h[d]·K[p0 + 16b + 8·half +
// j][d], one FMA chain per lane in d order (the AVX-512 kernel's order, so both levels give the
// same raw dot products, whatever H). Each K vector is loaded and widened once for the H heads.
template <int H, int B, typename T>
LOOM_AVX2 inline void ScoreBlocks(const float* q, int64_t q_stride, int hd,
                                  const PagedKvHeadT<T>& kv, int p0, __m256 (&acc)[H][B][2]) {
  const T* kt[B];  // each [hd, 16]
  LOOM_UNROLL
  for (int b = 0; b < B; ++b) {
    kt[b] = KeyBlock(kv, p0 + 16 * b);
    LOOM_UNROLL
    for (int h = 0; h < H; ++h) acc[h][b][0] = acc[h][b][1] = _mm256_setzero_ps();
  }
  if constexpr (std::is_same_v<T, uint16_t> && B == 1 && H > 1) {
    // One block for several heads: both halves widened first (4 registers), then per head two
    // broadcasts for four FMAs (re-broadcast per half, the loads outnumbered the FMAs).
    for (int d = 0; d < hd; d += 2) {
      __m256 ke[2], ko[2];
      LOOM_UNROLL
      for (int half = 0; half < 2; ++half)
        WidenBf16Pairs(kt[0] + 16 * d + 16 * half, ke[half], ko[half]);
      LOOM_UNROLL
      for (int h = 0; h < H; ++h) {
        const __m256 q0 = _mm256_broadcast_ss(q + h * q_stride + d);
        const __m256 q1 = _mm256_broadcast_ss(q + h * q_stride + d + 1);
        LOOM_UNROLL
        for (int half = 0; half < 2; ++half) {
          acc[h][0][half] =
              _mm256_fmadd_ps(q1, ko[half], _mm256_fmadd_ps(q0, ke[half], acc[h][0][half]));
        }
      }
    }
  } else if constexpr (std::is_same_v<T, uint16_t>) {  // dimension pairs: KeyIndex's bf16 layout
    for (int d = 0; d < hd; d += 2) {
      __m256 q0[H], q1[H];
      LOOM_UNROLL
      for (int h = 0; h < H; ++h) {
        q0[h] = _mm256_broadcast_ss(q + h * q_stride + d);
        q1[h] = _mm256_broadcast_ss(q + h * q_stride + d + 1);
      }
      LOOM_UNROLL
      for (int b = 0; b < B; ++b) {
        LOOM_UNROLL
        for (int half = 0; half < 2; ++half) {  // positions 8·half.., dimensions d and d + 1
          __m256 ke, ko;
          WidenBf16Pairs(kt[b] + 16 * d + 16 * half, ke, ko);
          LOOM_UNROLL
          for (int h = 0; h < H; ++h) {
            acc[h][b][half] =
                _mm256_fmadd_ps(q1[h], ko, _mm256_fmadd_ps(q0[h], ke, acc[h][b][half]));
          }
        }
      }
    }
  } else {
    for (int d = 0; d < hd; ++d) {
      LOOM_UNROLL
      for (int b = 0; b < B; ++b) {
        const __m256 k0 = Load8(kt[b] + 16 * d), k1 = Load8(kt[b] + 16 * d + 8);
        LOOM_UNROLL
        for (int h = 0; h < H; ++h) {
          const __m256 qd = _mm256_broadcast_ss(q + h * q_stride + d);
          acc[h][b][0] = _mm256_fmadd_ps(qd, k0, acc[h][b][0]);
          acc[h][b][1] = _mm256_fmadd_ps(qd, k1, acc[h][b][1]);
        }
      }
    }
  }
}

// All-ones in the lanes j of positions p0 + j inside [first, last].
LOOM_AVX2 inline __m256i LiveLanes(int p0, int first, int last) {
  const __m256i pos =
      _mm256_add_epi32(_mm256_set1_epi32(p0), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  const __m256i ge = _mm256_cmpgt_epi32(pos, _mm256_set1_epi32(first - 1));
  const __m256i le = _mm256_cmpgt_epi32(_mm256_set1_epi32(last + 1), pos);
  return _mm256_and_si256(ge, le);
}

// One 8-key half block's raw dot products → scaled (and soft-capped) live scores in scores[p0..];
// vmax the lane-wise maximum.
LOOM_AVX2 inline void FinishScores(__m256 acc, __m256 vscale, float softcap, int p0, int first,
                                   int last, float* scores, __m256& vmax) {
  __m256 s = _mm256_mul_ps(acc, vscale);
  if (softcap > 0) {
    alignas(32) float tmp[8];
    _mm256_store_ps(tmp, s);
    for (float& t : tmp) t = std::tanh(t / softcap) * softcap;  // transformers' order
    s = _mm256_load_ps(tmp);
  }
  const __m256i live = LiveLanes(p0, first, last);
  _mm256_maskstore_ps(scores + p0, live, s);
  vmax = _mm256_blendv_ps(vmax, _mm256_max_ps(vmax, s), _mm256_castsi256_ps(live));
}

// Softmax weights of H heads over [first, last] into scores + h·scores_stride: raw scores 4 blocks
// at a time for one head (8 FMA chains), 2 for two, 1 for three or four (the K loads shared),
// then per head exp(s − max) 8 lanes at a time and each weight times 1 / Σ (one f32 multiply,
// the product the V pass used to form itself: the same bits).
template <int H, typename T>
LOOM_AVX2 void WeightsOfHeads(const float* q, int64_t q_stride, int hd, const PagedKvHeadT<T>& kv,
                              int first, int last, float scale, float softcap, float* scores,
                              int64_t scores_stride) {
  constexpr int B = H == 1 ? 4 : H == 2 ? 2 : 1;
  __m256 vmax[H];
  LOOM_UNROLL
  for (int h = 0; h < H; ++h) vmax[h] = _mm256_set1_ps(-INFINITY);
  const __m256 vscale = _mm256_set1_ps(scale);
  int p0 = first & ~15;
  for (; p0 + 16 * (B - 1) <= last; p0 += 16 * B) {  // B whole blocks inside the table
    __m256 acc[H][B][2];
    ScoreBlocks<H, B>(q, q_stride, hd, kv, p0, acc);
    LOOM_UNROLL
    for (int h = 0; h < H; ++h) {
      float* sc = scores + h * scores_stride;
      LOOM_UNROLL
      for (int b = 0; b < B; ++b) {
        const int pb = p0 + 16 * b;
        if (pb + 8 > first)
          FinishScores(acc[h][b][0], vscale, softcap, pb, first, last, sc, vmax[h]);
        if (pb + 8 <= last)
          FinishScores(acc[h][b][1], vscale, softcap, pb + 8, first, last, sc, vmax[h]);
      }
    }
  }
  for (; p0 <= last; p0 += 16) {
    __m256 acc[H][1][2];
    ScoreBlocks<H, 1>(q, q_stride, hd, kv, p0, acc);
    LOOM_UNROLL
    for (int h = 0; h < H; ++h) {
      float* sc = scores + h * scores_stride;
      if (p0 + 8 > first) FinishScores(acc[h][0][0], vscale, softcap, p0, first, last, sc, vmax[h]);
      if (p0 + 8 <= last)
        FinishScores(acc[h][0][1], vscale, softcap, p0 + 8, first, last, sc, vmax[h]);
    }
  }
  LOOM_UNROLL
  for (int h = 0; h < H; ++h) {
    float* sc = scores + h * scores_stride;
    const __m256 vmx = _mm256_set1_ps(Max8(vmax[h]));
    __m256 vsum = _mm256_setzero_ps();
    for (int p = first & ~7; p <= last; p += 8) {
      const __m256i live = LiveLanes(p, first, last);
      const __m256 e =
          _mm256_and_ps(ExpNonPositive(_mm256_sub_ps(_mm256_maskload_ps(sc + p, live), vmx)),
                        _mm256_castsi256_ps(live));
      _mm256_maskstore_ps(sc + p, live, e);
      vsum = _mm256_add_ps(vsum, e);
    }
    const __m256 inv = _mm256_set1_ps(1.0f / Sum8(vsum));
    // Masked only at the two ends (a masked store is slow on AMD cores).
    int p = first;
    for (; p + 8 <= last + 1; p += 8)
      _mm256_storeu_ps(sc + p, _mm256_mul_ps(_mm256_loadu_ps(sc + p), inv));
    for (; p <= last; ++p) sc[p] *= inv[0];
  }
}

// out_h[d0 : d0 + 8·NC] = Σ_p w_h[p] · V[p][d0 : …] for H heads (weights at w + h·w_stride,
// outputs at out + h·out_stride), each V row loaded and widened once for the H heads; every
// output element one FMA chain in p order, whatever H and NC (the same bits as one head).
template <int H, int NC, typename T>
LOOM_AVX2 inline void AccumulateV(const float* w, int64_t w_stride, const PagedKvHeadT<T>& kv,
                                  int first, int last, int hd, int d0, float* out,
                                  int64_t out_stride) {
  __m256 o[H][NC];
  LOOM_UNROLL
  for (int h = 0; h < H; ++h) LOOM_UNROLL
  for (int c = 0; c < NC; ++c) o[h][c] = _mm256_setzero_ps();
  // bf16 with NC even: 16 elements per load, widened as even (shifted) and odd (masked) halves,
  // register c + 1 holding the odd ones (one ALU µop per 8 lanes instead of two); the same FMAs
  // per element in the same order, interleaved back on the store.
  constexpr bool kPairs = std::is_same_v<T, uint16_t> && NC % 2 == 0;
  // Rows of one cache block are hd apart: the block table is read once per block.
  const T* v = nullptr;
  for (int p = first, end = -1; p <= last; ++p, v += hd) {
    if (p > end) {
      end = std::min(last, p | 15);
      v = ValueRow(kv, p, hd) + d0;
    }
    if constexpr (H == 1) {  // 8 output registers: widen and use one chunk at a time
      const __m256 wp = _mm256_broadcast_ss(w + p);
      if constexpr (kPairs) {
        LOOM_UNROLL
        for (int c = 0; c < NC; c += 2) {
          __m256 even, odd;
          WidenBf16Pairs(v + 8 * c, even, odd);
          o[0][c] = _mm256_fmadd_ps(wp, even, o[0][c]);
          o[0][c + 1] = _mm256_fmadd_ps(wp, odd, o[0][c + 1]);
        }
      } else {
        LOOM_UNROLL
        for (int c = 0; c < NC; ++c) o[0][c] = _mm256_fmadd_ps(wp, Load8(v + 8 * c), o[0][c]);
      }
    } else {
      __m256 vv[NC];
      if constexpr (kPairs) {
        LOOM_UNROLL
        for (int c = 0; c < NC; c += 2) WidenBf16Pairs(v + 8 * c, vv[c], vv[c + 1]);
      } else {
        LOOM_UNROLL
        for (int c = 0; c < NC; ++c) vv[c] = Load8(v + 8 * c);
      }
      LOOM_UNROLL
      for (int h = 0; h < H; ++h) {
        const __m256 wp = _mm256_broadcast_ss(w + h * w_stride + p);
        LOOM_UNROLL
        for (int c = 0; c < NC; ++c) o[h][c] = _mm256_fmadd_ps(wp, vv[c], o[h][c]);
      }
    }
  }
  LOOM_UNROLL
  for (int h = 0; h < H; ++h) {
    float* oh = out + h * out_stride + d0;
    if constexpr (kPairs) {
      LOOM_UNROLL
      for (int c = 0; c < NC; c += 2) {  // e0 o0 e1 o1 | e4 o4 e5 o5 and e2 o2 e3 o3 | e6 o6 e7 o7
        const __m256 lo = _mm256_unpacklo_ps(o[h][c], o[h][c + 1]);
        const __m256 hi = _mm256_unpackhi_ps(o[h][c], o[h][c + 1]);
        _mm256_storeu_ps(oh + 8 * c, _mm256_permute2f128_ps(lo, hi, 0x20));
        _mm256_storeu_ps(oh + 8 * c + 8, _mm256_permute2f128_ps(lo, hi, 0x31));
      }
    } else {
      LOOM_UNROLL
      for (int c = 0; c < NC; ++c) _mm256_storeu_ps(oh + 8 * c, o[h][c]);
    }
  }
}

// V for H heads over every dimension: one head 64 dimensions per pass (8 registers), two heads
// 32, three or four 16 (≤ 8 accumulators), then what is left 16 and 8 at a time.
template <int H, typename T>
LOOM_AVX2 void ValuesOfHeads(const float* w, int64_t w_stride, const PagedKvHeadT<T>& kv, int first,
                             int last, int hd, float* out, int64_t out_stride) {
  constexpr int kWide = H == 1 ? 8 : H == 2 ? 4 : 2;
  int d0 = 0;
  for (; d0 + 8 * kWide <= hd; d0 += 8 * kWide) {
    AccumulateV<H, kWide>(w, w_stride, kv, first, last, hd, d0, out, out_stride);
  }
  if constexpr (H == 1) {
    switch ((hd - d0) / 8) {
      case 7:
        return AccumulateV<1, 7>(w, w_stride, kv, first, last, hd, d0, out, out_stride);
      case 6:
        return AccumulateV<1, 6>(w, w_stride, kv, first, last, hd, d0, out, out_stride);
      case 5:
        return AccumulateV<1, 5>(w, w_stride, kv, first, last, hd, d0, out, out_stride);
      case 4:
        return AccumulateV<1, 4>(w, w_stride, kv, first, last, hd, d0, out, out_stride);
      case 3:
        return AccumulateV<1, 3>(w, w_stride, kv, first, last, hd, d0, out, out_stride);
      case 2:
        return AccumulateV<1, 2>(w, w_stride, kv, first, last, hd, d0, out, out_stride);
      case 1:
        return AccumulateV<1, 1>(w, w_stride, kv, first, last, hd, d0, out, out_stride);
      default:
        return;
    }
  } else {
    for (; d0 + 16 <= hd; d0 += 16) {
      AccumulateV<H, 2>(w, w_stride, kv, first, last, hd, d0, out, out_stride);
    }
    if (d0 < hd) AccumulateV<H, 1>(w, w_stride, kv, first, last, hd, d0, out, out_stride);
  }
}

// Query heads of one KV head, up to 4 at a time: keys 16 at a time (a cache block's transposed
// K: 16 positions a row) as two 8-lane halves, exp 8 lanes at a time, then V with the outputs in
// registers. Every score and sum has an order fixed by the row's own positions and head, so a
// row's result never depends on the other rows, nor on how many heads one call takes. Head sizes
// that are not a multiple of 8 take the scalar kernel.
template <typename T>
LOOM_AVX2 void AttendHeadsAvx2T(int heads, const float* q, int64_t q_stride, int hd,
                                const PagedKvHeadT<T>& kv, int first, int last, float scale,
                                float softcap, float* scores, int64_t scores_stride, float* out,
                                int64_t out_stride) {
  if (hd % 8 != 0) {
    for (int h = 0; h < heads; ++h) {
      AttendRowScalar(q + h * q_stride, hd, kv, first, last, scale, softcap,
                      scores + h * scores_stride, out + h * out_stride);
    }
    return;
  }
  for (int h0 = 0; h0 < heads; h0 += 4) {
    const float* qh = q + h0 * q_stride;
    float* sc = scores + h0 * scores_stride;
    float* oh = out + h0 * out_stride;
    switch (std::min(4, heads - h0)) {
#define LOOM_HEADS_CASE(n)                                                                   \
  case n:                                                                                    \
    WeightsOfHeads<n>(qh, q_stride, hd, kv, first, last, scale, softcap, sc, scores_stride); \
    ValuesOfHeads<n>(sc, scores_stride, kv, first, last, hd, oh, out_stride);                \
    break;
      LOOM_HEADS_CASE(1)
      LOOM_HEADS_CASE(2)
      LOOM_HEADS_CASE(3)
      LOOM_HEADS_CASE(4)
#undef LOOM_HEADS_CASE
      default:
        break;
    }
  }
}
}  // namespace

void AttendRowAvx2(const float* q, int hd, const PagedKvHead& kv, int first, int last, float scale,
                   float softcap, float* scores, float* out) {
  AttendHeadsAvx2T(1, q, hd, hd, kv, first, last, scale, softcap, scores, 0, out, hd);
}
void AttendRowAvx2(const float* q, int hd, const PagedKvHeadBf16& kv, int first, int last,
                   float scale, float softcap, float* scores, float* out) {
  AttendHeadsAvx2T(1, q, hd, hd, kv, first, last, scale, softcap, scores, 0, out, hd);
}
void AttendHeadsAvx2(int heads, const float* q, int64_t q_stride, int hd, const PagedKvHead& kv,
                     int first, int last, float scale, float softcap, float* scores,
                     int64_t scores_stride, float* out, int64_t out_stride) {
  AttendHeadsAvx2T(heads, q, q_stride, hd, kv, first, last, scale, softcap, scores, scores_stride,
                   out, out_stride);
}
void AttendHeadsAvx2(int heads, const float* q, int64_t q_stride, int hd, const PagedKvHeadBf16& kv,
                     int first, int last, float scale, float softcap, float* scores,
                     int64_t scores_stride, float* out, int64_t out_stride) {
  AttendHeadsAvx2T(heads, q, q_stride, hd, kv, first, last, scale, softcap, scores, scores_stride,
                   out, out_stride);
}

}  // namespace loom::cpu
