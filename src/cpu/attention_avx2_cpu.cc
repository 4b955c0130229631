// Attention row kernel at the avx2 level: 8-lane key dot products, exp and V accumulation.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "cpu/attention_cpu.h"
#include "cpu/avx2_reduce.h"
#include "cpu/avx2_widen.h"
#include "cpu/exp_poly.h"

#define LOOM_AVX2 __attribute__((target("avx2,fma")))

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
  const __m256i two_n = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
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

// Raw scores of B blocks from p0 (a multiple of 16), each as two 8-lane halves: lane j of
// acc[b][half] = Σ_d q[d]·K[p0 + 16b + 8·half + j][d], one FMA chain per lane in d order (the
// AVX-512 kernel's order, so both levels give the same raw dot products).
template <int B, typename T>
LOOM_AVX2 inline void ScoreBlocks(const float* q, int hd, const PagedKvHeadT<T>& kv, int p0,
                                  __m256 (&acc)[B][2]) {
  const T* kt[B];  // each [hd, 16]
  for (int b = 0; b < B; ++b) {
    kt[b] = KeyBlock(kv, p0 + 16 * b);
    acc[b][0] = acc[b][1] = _mm256_setzero_ps();
  }
  if constexpr (std::is_same_v<T, uint16_t>) {  // dimension pairs: KeyIndex's bf16 layout
    for (int d = 0; d < hd; d += 2) {
      const __m256 q0 = _mm256_broadcast_ss(q + d), q1 = _mm256_broadcast_ss(q + d + 1);
      for (int b = 0; b < B; ++b) {
        for (int half = 0; half < 2; ++half) {  // positions 8·half.., dimensions d and d + 1
          __m256 ke, ko;
          WidenBf16Pairs(kt[b] + 16 * d + 16 * half, ke, ko);
          acc[b][half] = _mm256_fmadd_ps(q1, ko, _mm256_fmadd_ps(q0, ke, acc[b][half]));
        }
      }
    }
  } else {
    for (int d = 0; d < hd; ++d) {
      const __m256 qd = _mm256_broadcast_ss(q + d);
      for (int b = 0; b < B; ++b) {
        acc[b][0] = _mm256_fmadd_ps(qd, Load8(kt[b] + 16 * d), acc[b][0]);
        acc[b][1] = _mm256_fmadd_ps(qd, Load8(kt[b] + 16 * d + 8), acc[b][1]);
      }
    }
  }
}

// All-ones in the lanes j of positions p0 + j inside [first, last].
LOOM_AVX2 inline __m256i LiveLanes(int p0, int first, int last) {
  const __m256i pos = _mm256_add_epi32(_mm256_set1_epi32(p0), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
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

// out[d0 : d0 + 8·NC] = Σ_p w_p · V[p][d0 : …], the output in NC registers.
template <int NC, typename T>
LOOM_AVX2 inline void AccumulateV(const float* scores, float inv, const PagedKvHeadT<T>& kv,
                                  int first, int last, int hd, int d0, float* out) {
  __m256 o[NC];
  for (int c = 0; c < NC; ++c) o[c] = _mm256_setzero_ps();
  // bf16 with NC even: 16 elements per load, widened as even (shifted) and odd (masked) halves,
  // register c + 1 holding the odd ones (one ALU µop per 8 lanes instead of two); the same FMAs
  // per element in the same order, interleaved back on the store.
  constexpr bool kPairs = std::is_same_v<T, uint16_t> && NC % 2 == 0;
  for (int p = first; p <= last; ++p) {
    const T* v = ValueRow(kv, p, hd) + d0;
    const __m256 w = _mm256_set1_ps(scores[p] * inv);
    if constexpr (kPairs) {
      for (int c = 0; c < NC; c += 2) {
        __m256 even, odd;
        WidenBf16Pairs(v + 8 * c, even, odd);
        o[c] = _mm256_fmadd_ps(w, even, o[c]);
        o[c + 1] = _mm256_fmadd_ps(w, odd, o[c + 1]);
      }
    } else {
      for (int c = 0; c < NC; ++c) o[c] = _mm256_fmadd_ps(w, Load8(v + 8 * c), o[c]);
    }
  }
  if constexpr (kPairs) {
    for (int c = 0; c < NC; c += 2) {  // e0 o0 e1 o1 | e4 o4 e5 o5 and e2 o2 e3 o3 | e6 o6 e7 o7
      const __m256 lo = _mm256_unpacklo_ps(o[c], o[c + 1]), hi = _mm256_unpackhi_ps(o[c], o[c + 1]);
      _mm256_storeu_ps(out + d0 + 8 * c, _mm256_permute2f128_ps(lo, hi, 0x20));
      _mm256_storeu_ps(out + d0 + 8 * c + 8, _mm256_permute2f128_ps(lo, hi, 0x31));
    }
  } else {
    for (int c = 0; c < NC; ++c) _mm256_storeu_ps(out + d0 + 8 * c, o[c]);
  }
}

// Keys 16 at a time (a cache block's transposed K: 16 positions a row), as two 8-lane halves,
// 4 blocks at once; exp 8 lanes at a time, then V with the output in registers (64 dimensions per
// pass). Every score and sum has an order fixed by the row's own positions, so a row's result
// never depends on the other rows. Head sizes that are not a multiple of 8 take the scalar kernel.
template <typename T>
LOOM_AVX2 void AttendRowAvx2T(const float* q, int hd, const PagedKvHeadT<T>& kv, int first,
                              int last, float scale, float softcap, float* scores, float* out) {
  if (hd % 8 != 0) return AttendRowScalar(q, hd, kv, first, last, scale, softcap, scores, out);
  __m256 vmax = _mm256_set1_ps(-INFINITY);
  const __m256 vscale = _mm256_set1_ps(scale);
  int p0 = first & ~15;
  for (; p0 + 48 <= last; p0 += 64) {  // 4 whole blocks: 8 FMA chains
    __m256 acc[4][2];
    ScoreBlocks<4>(q, hd, kv, p0, acc);
    for (int b = 0; b < 4; ++b) {
      FinishScores(acc[b][0], vscale, softcap, p0 + 16 * b, first, last, scores, vmax);
      FinishScores(acc[b][1], vscale, softcap, p0 + 16 * b + 8, first, last, scores, vmax);
    }
  }
  for (; p0 <= last; p0 += 16) {
    __m256 acc[1][2];
    ScoreBlocks<1>(q, hd, kv, p0, acc);
    if (p0 + 8 > first) FinishScores(acc[0][0], vscale, softcap, p0, first, last, scores, vmax);
    if (p0 + 8 <= last) FinishScores(acc[0][1], vscale, softcap, p0 + 8, first, last, scores, vmax);
  }
  const __m256 vmx = _mm256_set1_ps(Max8(vmax));
  __m256 vsum = _mm256_setzero_ps();
  for (int p0 = first & ~7; p0 <= last; p0 += 8) {
    const __m256i live = LiveLanes(p0, first, last);
    const __m256 e = _mm256_and_ps(ExpNonPositive(_mm256_sub_ps(_mm256_maskload_ps(scores + p0, live), vmx)),
                                   _mm256_castsi256_ps(live));
    _mm256_maskstore_ps(scores + p0, live, e);
    vsum = _mm256_add_ps(vsum, e);
  }
  const float inv = 1.0f / Sum8(vsum);
  int d0 = 0;
  for (; d0 + 64 <= hd; d0 += 64) AccumulateV<8>(scores, inv, kv, first, last, hd, d0, out);
  switch ((hd - d0) / 8) {
    case 7: return AccumulateV<7>(scores, inv, kv, first, last, hd, d0, out);
    case 6: return AccumulateV<6>(scores, inv, kv, first, last, hd, d0, out);
    case 5: return AccumulateV<5>(scores, inv, kv, first, last, hd, d0, out);
    case 4: return AccumulateV<4>(scores, inv, kv, first, last, hd, d0, out);
    case 3: return AccumulateV<3>(scores, inv, kv, first, last, hd, d0, out);
    case 2: return AccumulateV<2>(scores, inv, kv, first, last, hd, d0, out);
    case 1: return AccumulateV<1>(scores, inv, kv, first, last, hd, d0, out);
    default: return;
  }
}
}  // namespace

void AttendRowAvx2(const float* q, int hd, const PagedKvHead& kv, int first, int last, float scale,
                   float softcap, float* scores, float* out) {
  AttendRowAvx2T(q, hd, kv, first, last, scale, softcap, scores, out);
}
void AttendRowAvx2(const float* q, int hd, const PagedKvHeadBf16& kv, int first, int last,
                   float scale, float softcap, float* scores, float* out) {
  AttendRowAvx2T(q, hd, kv, first, last, scale, softcap, scores, out);
}

}  // namespace loom::cpu
