// SiLU(g)·u on 16 lanes: one definition for SiluMulAvx512 and the AMX gate/up kernel, so both
// give the same bits for the same gate and up values.
#pragma once

#include <immintrin.h>

// The target attribute on the declaration too: clang refuses a __m512 argument otherwise.
extern "C" __attribute__((target("avx512f,avx512dq"))) __m512 _ZGVeN16v_expf(__m512 x);  // libmvec

namespace loom::cpu {

__attribute__((target("avx512f,avx512dq"))) inline __m512 SiluMul16(__m512 g, __m512 u) {
  const __m512 e = _ZGVeN16v_expf(_mm512_sub_ps(_mm512_setzero_ps(), g));
  const __m512 s = _mm512_div_ps(g, _mm512_add_ps(_mm512_set1_ps(1.0f), e));
  return _mm512_mul_ps(s, u);
}

}  // namespace loom::cpu
