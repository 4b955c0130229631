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

// max of v's 8 lanes, in Sum8's order.
__attribute__((target("avx2"))) inline float Max8(__m256 v) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

}  // namespace loom::cpu
