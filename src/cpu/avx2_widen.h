// Widening 8 bf16 values to an 8-lane f32 vector, shared by the avx2-level kernels (exact: bf16 is f32's upper half).
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace loom::cpu {

// f32 lanes of p[0..8): each 16-bit value shifted into the upper half of a 32-bit lane.
__attribute__((target("avx2"))) inline __m256 Bf16x8ToF32(const uint16_t* p) {
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(v), 16));
}

}  // namespace loom::cpu
