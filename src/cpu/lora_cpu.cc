// LoRA expand kernels: scalar reference and AVX-512 (16 outputs per register, rank FMAs each).
#include "cpu/lora_cpu.h"

#include <immintrin.h>

#define LOOM_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma,f16c")))

namespace loom::cpu {

namespace {
inline float Load(DType dtype, const void* p, int64_t i) {
  switch (dtype) {
    case DType::kF32: return static_cast<const float*>(p)[i];
    case DType::kF16: return F16ToF32(static_cast<const uint16_t*>(p)[i]);
    case DType::kBF16: return Bf16ToF32(static_cast<const uint16_t*>(p)[i]);
  }
  return 0;
}

// 16 (or `m` masked) consecutive Bᵀ values widened to f32.
LOOM_AVX512 inline __m512 Load16(DType dtype, const void* p, int64_t i, __mmask16 m) {
  switch (dtype) {
    case DType::kF32: return _mm512_maskz_loadu_ps(m, static_cast<const float*>(p) + i);
    case DType::kF16: return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, static_cast<const uint16_t*>(p) + i));
    case DType::kBF16:
      return _mm512_castsi512_ps(_mm512_slli_epi32(
          _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, static_cast<const uint16_t*>(p) + i)), 16));
  }
  return _mm512_setzero_ps();
}
}  // namespace

void LoraExpandScalar(const float* t, int64_t rows, int rank, DType dtype, const void* bt,
                      int64_t out, int64_t j0, int64_t j1, float* d) {
  const int64_t width = j1 - j0;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = j0; j < j1; ++j) {
      float acc = 0;
      for (int k = 0; k < rank; ++k) acc += t[r * rank + k] * Load(dtype, bt, k * out + j);
      d[r * width + (j - j0)] = acc;
    }
  }
}

LOOM_AVX512 void LoraExpandAvx512(const float* t, int64_t rows, int rank, DType dtype,
                                  const void* bt, int64_t out, int64_t j0, int64_t j1, float* d) {
  const int64_t width = j1 - j0;
  for (int64_t j = j0; j < j1; j += 16) {
    const __mmask16 m = j + 16 <= j1 ? static_cast<__mmask16>(0xffff)
                                     : static_cast<__mmask16>((1u << (j1 - j)) - 1);
    // Up to 4 rows share each loaded Bᵀ vector.
    for (int64_t r = 0; r < rows; r += 4) {
      const int64_t nr = rows - r < 4 ? rows - r : 4;
      __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
      for (int k = 0; k < rank; ++k) {
        const __m512 b = Load16(dtype, bt, int64_t{k} * out + j, m);
        for (int64_t i = 0; i < nr; ++i) {
          acc[i] = _mm512_fmadd_ps(_mm512_set1_ps(t[(r + i) * rank + k]), b, acc[i]);
        }
      }
      for (int64_t i = 0; i < nr; ++i) _mm512_mask_storeu_ps(d + (r + i) * width + (j - j0), m, acc[i]);
    }
  }
}

void LoraExpand(Isa isa, const float* t, int64_t rows, int rank, DType dtype, const void* bt,
                int64_t out, int64_t j0, int64_t j1, float* d) {
  switch (isa) {
    case Isa::kAmx:
    case Isa::kAvx512Bf16:
    case Isa::kAvx512: return LoraExpandAvx512(t, rows, rank, dtype, bt, out, j0, j1, d);
    case Isa::kAvx2:
    case Isa::kScalar: return LoraExpandScalar(t, rows, rank, dtype, bt, out, j0, j1, d);
  }
}

}  // namespace loom::cpu
