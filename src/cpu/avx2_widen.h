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

// vpshufb control: in each 128-bit lane of the broadcast 8 values, value 4·lane + i into the upper
// half of 32-bit lane i (bytes 0x80: zero).
alignas(32) inline constexpr uint32_t kBf16WidenControl[8] = {
    0x01008080, 0x03028080, 0x05048080, 0x07068080,
    0x09088080, 0x0B0A8080, 0x0D0C8080, 0x0F0E8080};

// The same values as Bf16x8ToF32 from a 128-bit broadcast load and one in-lane vpshufb whose
// control is read from memory at each use (an empty asm hides the address, so GCC folds the load
// into the shuffle instead of hoisting the control into one of the 16 registers a 4 × 3 tile
// fills): one shuffle-pipe uop per 8 weights where vpmovzxwd + vpslld are two, and Zen 3 issues
// those on the pipes its second FMA unit shares. Prefill tiles only: decode, which streams from
// DRAM, measured a little slower with it (the extra load per 8 weights).
__attribute__((target("avx2"))) inline __m256 Bf16x8ToF32Shuffled(const uint16_t* p) {
  const __m256i v = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  const uint32_t* control = kBf16WidenControl;
  asm volatile("" : "+r"(control));
  return _mm256_castsi256_ps(
      _mm256_shuffle_epi8(v, _mm256_load_si256(reinterpret_cast<const __m256i*>(control))));
}

}  // namespace loom::cpu
