// Horizontal reductions of one 8-lane AVX2 vector, shared by the avx2-level kernels (fixed order: the halves, then pairs, then the last two).
#pragma once

#include <immintrin.h>

namespace loom::cpu {

// Σ of v's 8 lanes: (lanes i and i + 4), then (0 + 2, 1 + 3), then the last pair. Callers' bits
// (batch invariance, equality with other kernels) depend on this order: do not change it.
__attribute__((target("avx2"))) inline float Sum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// {Σa, Σb, Σc, Σd}, each in Sum8's order (the same bits as four Sum8 calls, in a third of the
// instructions): the halves of a and c (b and d) in one add, the pairs of all four in one, the
// last pairs in one horizontal add.
__attribute__((target("avx2"))) inline __m128 Sum8x4(__m256 a, __m256 b, __m256 c, __m256 d) {
  const __m256 ac = _mm256_add_ps(_mm256_permute2f128_ps(a, c, 0x20),
                                  _mm256_permute2f128_ps(a, c, 0x31));  // [a_i + a_i+4 | c_i + c_i+4]
  const __m256 bd = _mm256_add_ps(_mm256_permute2f128_ps(b, d, 0x20),
                                  _mm256_permute2f128_ps(b, d, 0x31));
  const __m256 pairs = _mm256_add_ps(_mm256_shuffle_ps(ac, bd, _MM_SHUFFLE(1, 0, 1, 0)),
                                     _mm256_shuffle_ps(ac, bd, _MM_SHUFFLE(3, 2, 3, 2)));
  const __m256 h = _mm256_hadd_ps(pairs, pairs);  // [Σa, Σb, Σa, Σb | Σc, Σd, Σc, Σd]
  return _mm_castpd_ps(_mm_unpacklo_pd(_mm_castps_pd(_mm256_castps256_ps128(h)),
                                       _mm_castps_pd(_mm256_extractf128_ps(h, 1))));
}

// max of v's 8 lanes, in Sum8's order.
__attribute__((target("avx2"))) inline float Max8(__m256 v) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

}  // namespace loom::cpu
