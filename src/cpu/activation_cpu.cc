// SiLU·mul kernels; the AVX-512 and AVX2 ones use glibc's libmvec 16- and 8-lane expf (≤ 4 ulp).
#include "cpu/activation_cpu.h"

#include <immintrin.h>

#include <cmath>

#include "cpu/silu_avx512.h"

#define LOOM_AVX512 __attribute__((target("avx512f,avx512dq")))
#define LOOM_AVX2 __attribute__((target("avx2,fma")))

// The target attribute on the declaration too: clang refuses a __m512 argument otherwise.
extern "C" LOOM_AVX2 __m256 _ZGVdN8v_expf(__m256 x);     // glibc libmvec, AVX2

namespace loom::cpu {

void SiluMulScalar(float* gate, const float* up, int64_t count) {
  for (int64_t i = 0; i < count; ++i) {
    const float g = gate[i];
    gate[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

// The tail runs the same vector arithmetic on masked lanes: an element's result never depends on
// where it falls in the call (libmvec's expf and libm's differ in the last bits), so a row's
// SiLU is the same whether its row starts a call or sits at an unaligned offset in a batch (an
// expert FFN of 24 was not batch-invariant).
LOOM_AVX512 void SiluMulAvx512(float* gate, const float* up, int64_t count) {
  int64_t i = 0;
  for (; i + 16 <= count; i += 16) {
    _mm512_storeu_ps(gate + i, SiluMul16(_mm512_loadu_ps(gate + i), _mm512_loadu_ps(up + i)));
  }
  if (i < count) {
    const __mmask16 m = static_cast<__mmask16>((1u << (count - i)) - 1);
    _mm512_mask_storeu_ps(
        gate + i, m,
        SiluMul16(_mm512_maskz_loadu_ps(m, gate + i), _mm512_maskz_loadu_ps(m, up + i)));
  }
}

// On a Zen 2 the scalar loop (a libm expf call per element) was ~4 % of bf16 prefill.
LOOM_AVX2 inline __m256 SiluMul8(__m256 g, __m256 u) {
  const __m256 e = _ZGVdN8v_expf(_mm256_sub_ps(_mm256_setzero_ps(), g));
  return _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(_mm256_set1_ps(1.0f), e)), u);
}

// The tail as one more 8-lane step over a zero-padded copy (as the AVX-512 kernel's masked lanes).
LOOM_AVX2 void SiluMulAvx2(float* gate, const float* up, int64_t count) {
  int64_t i = 0;
  for (; i + 8 <= count; i += 8) {
    _mm256_storeu_ps(gate + i, SiluMul8(_mm256_loadu_ps(gate + i), _mm256_loadu_ps(up + i)));
  }
  if (i < count) {
    alignas(32) float g[8] = {0, 0, 0, 0, 0, 0, 0, 0}, u[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int64_t j = i; j < count; ++j) {
      g[j - i] = gate[j];
      u[j - i] = up[j];
    }
    _mm256_store_ps(g, SiluMul8(_mm256_load_ps(g), _mm256_load_ps(u)));
    for (int64_t j = i; j < count; ++j) gate[j] = g[j - i];
  }
}

void SiluMul(Isa isa, float* gate, const float* up, int64_t count) {
  switch (isa) {
    case Isa::kAmx:
    case Isa::kAvx512Bf16:
    case Isa::kAvx512: return SiluMulAvx512(gate, up, count);
    case Isa::kAvx2: return SiluMulAvx2(gate, up, count);
    case Isa::kScalar: return SiluMulScalar(gate, up, count);
  }
}

}  // namespace loom::cpu
