// Attention row kernel at the avx2 level: 8-lane key dot products, exp and V accumulation.
#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "cpu/attention_cpu.h"
#include "cpu/avx2_reduce.h"
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

// Lane j = the sum of v[j]'s 8 lanes, in an order that depends only on j.
LOOM_AVX2 inline __m256 HorizontalSums8(const __m256* v) {
  const __m256 t0 = _mm256_hadd_ps(_mm256_hadd_ps(v[0], v[1]), _mm256_hadd_ps(v[2], v[3]));
  const __m256 t1 = _mm256_hadd_ps(_mm256_hadd_ps(v[4], v[5]), _mm256_hadd_ps(v[6], v[7]));
  return _mm256_add_ps(_mm256_permute2f128_ps(t0, t1, 0x20), _mm256_permute2f128_ps(t0, t1, 0x31));
}

// All-ones in the lanes j of positions p0 + j inside [first, last].
LOOM_AVX2 inline __m256i LiveLanes(int p0, int first, int last) {
  const __m256i pos = _mm256_add_epi32(_mm256_set1_epi32(p0), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  const __m256i ge = _mm256_cmpgt_epi32(pos, _mm256_set1_epi32(first - 1));
  const __m256i le = _mm256_cmpgt_epi32(_mm256_set1_epi32(last + 1), pos);
  return _mm256_and_si256(ge, le);
}

// out[d0 : d0 + 8·NC] = Σ_p w_p · V[p][d0 : …], the output in NC registers.
template <int NC>
LOOM_AVX2 inline void AccumulateV(const float* scores, float inv, const PagedKvHead& kv, int first,
                                  int last, int hd, int d0, float* out) {
  __m256 o[NC];
  for (int c = 0; c < NC; ++c) o[c] = _mm256_setzero_ps();
  for (int p = first; p <= last; ++p) {
    const float* v = KvRow(kv.v, kv, p, hd) + d0;
    const __m256 w = _mm256_set1_ps(scores[p] * inv);
    for (int c = 0; c < NC; ++c) o[c] = _mm256_fmadd_ps(w, _mm256_loadu_ps(v + 8 * c), o[c]);
  }
  for (int c = 0; c < NC; ++c) _mm256_storeu_ps(out + d0 + 8 * c, o[c]);
}

}  // namespace

// Keys 8 at a time (half a cache block; a block's 16 positions of a head are contiguous): 8
// lane-wise dot products folded by HorizontalSums8, exp 8 lanes at a time, then V with the output
// in registers (64 dimensions per pass). Every score and sum has an order fixed by the row's own
// positions, so a row's result never depends on the other rows. Head sizes that are not a
// multiple of 8 take the scalar kernel.
LOOM_AVX2 void AttendRowAvx2(const float* q, int hd, const PagedKvHead& kv, int first, int last,
                             float scale, float softcap, float* scores, float* out) {
  if (hd % 8 != 0) return AttendRowScalar(q, hd, kv, first, last, scale, softcap, scores, out);
  __m256 vmax = _mm256_set1_ps(-INFINITY);
  for (int p0 = first & ~7; p0 <= last; p0 += 8) {
    const __m256i live = LiveLanes(p0, first, last);
    const int mask = _mm256_movemask_ps(_mm256_castsi256_ps(live));
    const float* kb = KvRow(kv.k, kv, p0, hd);  // [8, hd]: p0 is a multiple of 8 within its block
    __m256 acc[8];
    for (int j = 0; j < 8; ++j) {
      __m256 a = _mm256_setzero_ps();
      if ((mask >> j) & 1) {
        const float* k = kb + j * hd;
        for (int d = 0; d < hd; d += 8) a = _mm256_fmadd_ps(_mm256_loadu_ps(q + d), _mm256_loadu_ps(k + d), a);
      }
      acc[j] = a;
    }
    __m256 s = _mm256_mul_ps(HorizontalSums8(acc), _mm256_set1_ps(scale));
    if (softcap > 0) {
      alignas(32) float tmp[8];
      _mm256_store_ps(tmp, s);
      for (float& t : tmp) t = std::tanh(t / softcap) * softcap;  // transformers' order
      s = _mm256_load_ps(tmp);
    }
    _mm256_maskstore_ps(scores + p0, live, s);
    vmax = _mm256_blendv_ps(vmax, _mm256_max_ps(vmax, s), _mm256_castsi256_ps(live));
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

}  // namespace loom::cpu
