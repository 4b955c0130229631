// 16 consecutive f32/f16/bf16 values widened to f32 on AVX-512, one type per dtype: what the LoRA
// shrink and expand kernels load A and B with, and the AVX-512 f32-activation matmul its weights.
#pragma once

#include <immintrin.h>

#include <cstdint>

#define LOOM_WIDEN16_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma,f16c")))

namespace loom::cpu {

// Load: 16 values at p; LoadMasked: the first lanes of `m` (the others 0). A kernel templated on
// one of these has no dtype switch or index arithmetic per load (the LoRA expand ran a decode
// row at 10.8 multiply-adds per ns on one core, hot in L1, with them: BM_LoraExpandAdd/1).
struct Widen16F32 {
  using Elem = float;
  LOOM_WIDEN16_TARGET static __m512 Load(const void* p) { return _mm512_loadu_ps(p); }
  LOOM_WIDEN16_TARGET static __m512 LoadMasked(const void* p, __mmask16 m) {
    return _mm512_maskz_loadu_ps(m, p);
  }
};
struct Widen16F16 {
  using Elem = uint16_t;
  LOOM_WIDEN16_TARGET static __m512 Load(const void* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(static_cast<const __m256i*>(p)));
  }
  LOOM_WIDEN16_TARGET static __m512 LoadMasked(const void* p, __mmask16 m) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p));
  }
};
struct Widen16Bf16 {
  using Elem = uint16_t;
  LOOM_WIDEN16_TARGET static __m512 Load(const void* p) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(
        _mm512_cvtepu16_epi32(_mm256_loadu_si256(static_cast<const __m256i*>(p))), 16));
  }
  LOOM_WIDEN16_TARGET static __m512 LoadMasked(const void* p, __mmask16 m) {
    return _mm512_castsi512_ps(
        _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, p)), 16));
  }
};

}  // namespace loom::cpu
