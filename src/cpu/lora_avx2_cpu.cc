// LoRA shrink and expand kernels at the AVX2 level (8-lane f32 FMA); until these, AVX2 ran the scalar ones.
#include <immintrin.h>

#include <cmath>

#include "cpu/avx2_reduce.h"
#include "cpu/lora_cpu.h"

#define LOOM_AVX2 __attribute__((target("avx2,fma,f16c")))

namespace loom::cpu {

namespace {

// 8 consecutive values of A (shrink) or Bᵀ (expand) widened to f32.
LOOM_AVX2 inline __m256 Load8(DType dtype, const void* p, int64_t i) {
  switch (dtype) {
    case DType::kF32: return _mm256_loadu_ps(static_cast<const float*>(p) + i);
    case DType::kF16:
      return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(p) + i)));
    case DType::kBF16: {
      const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(p) + i));
      return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(v), 16));
    }
  }
  return _mm256_setzero_ps();
}

inline float Load1(DType dtype, const void* p, int64_t i) {
  switch (dtype) {
    case DType::kF32: return static_cast<const float*>(p)[i];
    case DType::kF16: return F16ToF32(static_cast<const uint16_t*>(p)[i]);
    case DType::kBF16: return Bf16ToF32(static_cast<const uint16_t*>(p)[i]);
  }
  return 0;
}

// Expand of 8 (or, at the right edge, 1..7) columns for up to 4 rows: acc = fma(t[r][k], Bᵀ[k][j],
// acc) in k order, the AVX-512 kernel's arithmetic lane for lane (the edge columns use fmaf, the
// same single rounding). Each row's value depends on its own t only.
template <bool kAdd>
LOOM_AVX2 void Expand(const float* t, int64_t rows, int rank, DType dtype, const void* bt,
                      int64_t out, int64_t j0, int64_t j1, float scale, float* y, int64_t ldy) {
  const __m256 vs = _mm256_set1_ps(scale);
  int64_t j = j0;
  for (; j + 8 <= j1; j += 8) {
    for (int64_t r = 0; r < rows; r += 4) {
      const int64_t nr = rows - r < 4 ? rows - r : 4;
      __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
      for (int k = 0; k < rank; ++k) {
        const __m256 b = Load8(dtype, bt, int64_t{k} * out + j);
        for (int64_t i = 0; i < nr; ++i) {
          acc[i] = _mm256_fmadd_ps(_mm256_set1_ps(t[(r + i) * rank + k]), b, acc[i]);
        }
      }
      for (int64_t i = 0; i < nr; ++i) {
        float* yr = y + (r + i) * ldy + (kAdd ? j : j - j0);
        _mm256_storeu_ps(yr, kAdd ? _mm256_fmadd_ps(vs, acc[i], _mm256_loadu_ps(yr)) : acc[i]);
      }
    }
  }
  for (; j < j1; ++j) {
    for (int64_t r = 0; r < rows; ++r) {
      float acc = 0;
      for (int k = 0; k < rank; ++k) acc = std::fma(t[r * rank + k], Load1(dtype, bt, int64_t{k} * out + j), acc);
      float* yr = y + r * ldy + (kAdd ? j : j - j0);
      *yr = kAdd ? std::fma(scale, acc, *yr) : acc;
    }
  }
}

}  // namespace

LOOM_AVX2 void LoraExpandAvx2(const float* t, int64_t rows, int rank, DType dtype, const void* bt,
                              int64_t out, int64_t j0, int64_t j1, float* d) {
  Expand<false>(t, rows, rank, dtype, bt, out, j0, j1, 1.0f, d, j1 - j0);
}

LOOM_AVX2 void LoraExpandAddAvx2(const float* t, int64_t rows, int rank, DType dtype, const void* bt,
                                 int64_t out, int64_t j0, int64_t j1, float scale, float* y,
                                 int64_t ldy) {
  Expand<true>(t, rows, rank, dtype, bt, out, j0, j1, scale, y, ldy);
}

// Blocks of up to 3 rows × 4 ranks (12 accumulators + 4 A vectors: AVX2's 16 registers). Each
// accumulator sums its row and rank over i in 8 lanes, then the lanes, then the tail i ≥ in/8·8
// in order: a row's sums depend on `in` only, never on how many rows share the call.
LOOM_AVX2 void LoraShrinkAvx2(const float* x, int64_t rows, int64_t in, DType dtype, const void* a,
                              int rank, float* t) {
  const int64_t full = in / 8 * 8;
  for (int64_t r = 0; r < rows; r += 3) {
    const int nr = static_cast<int>(rows - r < 3 ? rows - r : 3);
    for (int k = 0; k < rank; k += 4) {
      const int nk = rank - k < 4 ? rank - k : 4;
      __m256 acc[3][4];
      for (int i = 0; i < 3; ++i) {
        for (int q = 0; q < 4; ++q) acc[i][q] = _mm256_setzero_ps();
      }
      for (int64_t i0 = 0; i0 < full; i0 += 8) {
        __m256 av[4];
        for (int q = 0; q < nk; ++q) av[q] = Load8(dtype, a, int64_t{k + q} * in + i0);
        for (int i = 0; i < nr; ++i) {
          const __m256 xv = _mm256_loadu_ps(x + (r + i) * in + i0);
          for (int q = 0; q < nk; ++q) acc[i][q] = _mm256_fmadd_ps(xv, av[q], acc[i][q]);
        }
      }
      for (int i = 0; i < nr; ++i) {
        for (int q = 0; q < nk; ++q) {
          float s = Sum8(acc[i][q]);
          for (int64_t p = full; p < in; ++p) s += x[(r + i) * in + p] * Load1(dtype, a, int64_t{k + q} * in + p);
          t[(r + i) * rank + k + q] = s;
        }
      }
    }
  }
}

}  // namespace loom::cpu
