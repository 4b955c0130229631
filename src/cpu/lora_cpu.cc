// LoRA shrink and expand kernels: scalar reference and AVX-512 (AVX2: lora_avx2_cpu.cc), and the dispatch.
#include "cpu/lora_cpu.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>

#pragma GCC diagnostic ignored "-Wuninitialized"
#if !defined(__clang__)  // a gcc-only warning
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

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

int64_t LoraExpandHead(const float* t, int64_t rows, int rank, DType dtype, const void* bt,
                   int64_t j0, int64_t j1, bool add, float scale, float* y, int64_t ldy) {
  const int64_t head = std::min(j1, (j0 + kLoraPanel - 1) / kLoraPanel * kLoraPanel);
  for (int64_t j = j0; j < head; ++j) {
    for (int64_t r = 0; r < rows; ++r) {
      float acc = 0;
      for (int k = 0; k < rank; ++k) acc = std::fma(t[r * rank + k], Load(dtype, bt, LoraPanelIndex(rank, k, j)), acc);
      float* yr = y + r * ldy + (add ? j : j - j0);
      *yr = add ? std::fma(scale, acc, *yr) : acc;
    }
  }
  return head;
}

void LoraExpandScalar(const float* t, int64_t rows, int rank, DType dtype, const void* bt,
                      int64_t out, int64_t j0, int64_t j1, float* d) {
  const int64_t width = j1 - j0;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = j0; j < j1; ++j) {
      float acc = 0;
      for (int k = 0; k < rank; ++k) acc += t[r * rank + k] * Load(dtype, bt, LoraPanelIndex(rank, k, j));
      d[r * width + (j - j0)] = acc;
    }
  }
}

LOOM_AVX512 void LoraExpandAvx512(const float* t, int64_t rows, int rank, DType dtype,
                                  const void* bt, int64_t out, int64_t j0, int64_t j1, float* d) {
  const int64_t width = j1 - j0;
  for (int64_t j = LoraExpandHead(t, rows, rank, dtype, bt, j0, j1, false, 1.0f, d, width); j < j1; j += 16) {
    const __mmask16 m = j + 16 <= j1 ? static_cast<__mmask16>(0xffff)
                                     : static_cast<__mmask16>((1u << (j1 - j)) - 1);
    // Up to 4 rows share each loaded Bᵀ vector.
    for (int64_t r = 0; r < rows; r += 4) {
      const int64_t nr = rows - r < 4 ? rows - r : 4;
      __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
      for (int k = 0; k < rank; ++k) {
        const __m512 b = Load16(dtype, bt, LoraPanelIndex(rank, k, j), m);
        for (int64_t i = 0; i < nr; ++i) {
          acc[i] = _mm512_fmadd_ps(_mm512_set1_ps(t[(r + i) * rank + k]), b, acc[i]);
        }
      }
      for (int64_t i = 0; i < nr; ++i) _mm512_mask_storeu_ps(d + (r + i) * width + (j - j0), m, acc[i]);
    }
  }
}

void LoraExpandAddScalar(const float* t, int64_t rows, int rank, DType dtype, const void* bt,
                         int64_t out, int64_t j0, int64_t j1, float scale, float* y, int64_t ldy) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = j0; j < j1; ++j) {
      float acc = 0;
      for (int k = 0; k < rank; ++k) acc += t[r * rank + k] * Load(dtype, bt, LoraPanelIndex(rank, k, j));
      y[r * ldy + j] += scale * acc;
    }
  }
}

// NR rows × NC column vectors (16 columns each) per tile: NR·NC ≤ 8 independent fma chains, so
// one or two rows (decode segments) are not one chain of `rank` dependent fmas per 16 columns.
// Every element is acc = 0; acc = fma(t[r, k], bt[k, j], acc) for k in order; y = fma(scale,
// acc, y), whatever the tile: the bits do not depend on the row count (batch invariance) and
// equal the AVX2 kernel's.
template <int NR, int NC>
LOOM_AVX512 inline void ExpandAddTile(const float* t, int rank, DType dtype, const void* bt,
                                      int64_t out, int64_t j, int64_t j1, __m512 vs, float* y,
                                      int64_t ldy) {
  __mmask16 m[NC];
  for (int c = 0; c < NC; ++c) {
    const int64_t jc = j + 16 * c;
    m[c] = jc >= j1        ? static_cast<__mmask16>(0)
           : jc + 16 <= j1 ? static_cast<__mmask16>(0xffff)
                           : static_cast<__mmask16>((1u << (j1 - jc)) - 1);
  }
  __m512 acc[NR][NC];
  for (int r = 0; r < NR; ++r) {
    for (int c = 0; c < NC; ++c) acc[r][c] = _mm512_setzero_ps();
  }
  for (int k = 0; k < rank; ++k) {
    __m512 b[NC];
    for (int c = 0; c < NC; ++c) b[c] = Load16(dtype, bt, LoraPanelIndex(rank, k, j + 16 * c), m[c]);
    for (int r = 0; r < NR; ++r) {
      const __m512 tv = _mm512_set1_ps(t[r * rank + k]);
      for (int c = 0; c < NC; ++c) acc[r][c] = _mm512_fmadd_ps(tv, b[c], acc[r][c]);
    }
  }
  for (int r = 0; r < NR; ++r) {
    for (int c = 0; c < NC; ++c) {
      if (m[c] == 0) continue;
      float* yr = y + r * ldy + j + 16 * c;
      _mm512_mask_storeu_ps(yr, m[c], _mm512_fmadd_ps(vs, acc[r][c], _mm512_maskz_loadu_ps(m[c], yr)));
    }
  }
}

template <int NR, int NC>
LOOM_AVX512 void ExpandAddRows(const float* t, int rank, DType dtype, const void* bt, int64_t out,
                               int64_t j0, int64_t j1, __m512 vs, float* y, int64_t ldy) {
  for (int64_t j = j0; j < j1; j += 16 * NC) {
    ExpandAddTile<NR, NC>(t, rank, dtype, bt, out, j, j1, vs, y, ldy);
  }
}

LOOM_AVX512 void LoraExpandAddAvx512(const float* t, int64_t rows, int rank, DType dtype,
                                     const void* bt, int64_t out, int64_t j0, int64_t j1,
                                     float scale, float* y, int64_t ldy) {
  const __m512 vs = _mm512_set1_ps(scale);
  j0 = LoraExpandHead(t, rows, rank, dtype, bt, j0, j1, true, scale, y, ldy);
  for (int64_t r = 0; r < rows; r += 8) {
    const float* tr = t + r * rank;
    float* yr = y + r * ldy;
    switch (rows - r < 8 ? rows - r : 8) {
      case 1: ExpandAddRows<1, 8>(tr, rank, dtype, bt, out, j0, j1, vs, yr, ldy); break;
      case 2: ExpandAddRows<2, 4>(tr, rank, dtype, bt, out, j0, j1, vs, yr, ldy); break;
      case 3: ExpandAddRows<3, 2>(tr, rank, dtype, bt, out, j0, j1, vs, yr, ldy); break;
      case 4: ExpandAddRows<4, 2>(tr, rank, dtype, bt, out, j0, j1, vs, yr, ldy); break;
      case 5: ExpandAddRows<5, 1>(tr, rank, dtype, bt, out, j0, j1, vs, yr, ldy); break;
      case 6: ExpandAddRows<6, 1>(tr, rank, dtype, bt, out, j0, j1, vs, yr, ldy); break;
      case 7: ExpandAddRows<7, 1>(tr, rank, dtype, bt, out, j0, j1, vs, yr, ldy); break;
      default: ExpandAddRows<8, 1>(tr, rank, dtype, bt, out, j0, j1, vs, yr, ldy); break;
    }
  }
}

void LoraExpandAdd(Isa isa, const float* t, int64_t rows, int rank, DType dtype, const void* bt,
                   int64_t out, int64_t j0, int64_t j1, float scale, float* y, int64_t ldy) {
  switch (isa) {
    case Isa::kAmx:
    case Isa::kAvx512Bf16:
    case Isa::kAvx512: return LoraExpandAddAvx512(t, rows, rank, dtype, bt, out, j0, j1, scale, y, ldy);
    case Isa::kAvx2: return LoraExpandAddAvx2(t, rows, rank, dtype, bt, out, j0, j1, scale, y, ldy);
    case Isa::kScalar: return LoraExpandAddScalar(t, rows, rank, dtype, bt, out, j0, j1, scale, y, ldy);
  }
}

void LoraShrinkScalar(const float* x, int64_t rows, int64_t in, DType dtype, const void* a,
                      int rank, float* t) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int k = 0; k < rank; ++k) {
      float acc = 0;
      for (int64_t i = 0; i < in; ++i) acc += x[r * in + i] * Load(dtype, a, k * in + i);
      t[r * rank + k] = acc;
    }
  }
}

// Blocks of up to 4 rows × 4 ranks share their loads (16 accumulators); each accumulator sums
// its own row and rank over i in 16 lanes, then _mm512_reduce_add_ps: the order of a row's sums
// depends only on `in`.
LOOM_AVX512 void LoraShrinkAvx512(const float* x, int64_t rows, int64_t in, DType dtype,
                                  const void* a, int rank, float* t) {
  const int64_t full = in / 16 * 16;
  const __mmask16 tail = static_cast<__mmask16>((1u << (in - full)) - 1);
  for (int64_t r = 0; r < rows; r += 4) {
    const int nr = static_cast<int>(rows - r < 4 ? rows - r : 4);
    for (int k = 0; k < rank; k += 4) {
      const int nk = rank - k < 4 ? rank - k : 4;
      __m512 acc[4][4];
      for (int i = 0; i < 4; ++i) {
        for (int q = 0; q < 4; ++q) acc[i][q] = _mm512_setzero_ps();
      }
      for (int64_t i0 = 0; i0 < in; i0 += 16) {
        const __mmask16 m = i0 < full ? static_cast<__mmask16>(0xffff) : tail;
        __m512 av[4];
        for (int q = 0; q < nk; ++q) av[q] = Load16(dtype, a, int64_t{k + q} * in + i0, m);
        for (int i = 0; i < nr; ++i) {
          const __m512 xv = _mm512_maskz_loadu_ps(m, x + (r + i) * in + i0);
          for (int q = 0; q < nk; ++q) acc[i][q] = _mm512_fmadd_ps(xv, av[q], acc[i][q]);
        }
      }
      for (int i = 0; i < nr; ++i) {
        for (int q = 0; q < nk; ++q) t[(r + i) * rank + k + q] = _mm512_reduce_add_ps(acc[i][q]);
      }
    }
  }
}

void LoraShrink(Isa isa, const float* x, int64_t rows, int64_t in, DType dtype, const void* a,
                int rank, float* t) {
  switch (isa) {
    case Isa::kAmx:
    case Isa::kAvx512Bf16:
    case Isa::kAvx512: return LoraShrinkAvx512(x, rows, in, dtype, a, rank, t);
    case Isa::kAvx2: return LoraShrinkAvx2(x, rows, in, dtype, a, rank, t);
    case Isa::kScalar: return LoraShrinkScalar(x, rows, in, dtype, a, rank, t);
  }
}

void LoraExpand(Isa isa, const float* t, int64_t rows, int rank, DType dtype, const void* bt,
                int64_t out, int64_t j0, int64_t j1, float* d) {
  switch (isa) {
    case Isa::kAmx:
    case Isa::kAvx512Bf16:
    case Isa::kAvx512: return LoraExpandAvx512(t, rows, rank, dtype, bt, out, j0, j1, d);
    case Isa::kAvx2: return LoraExpandAvx2(t, rows, rank, dtype, bt, out, j0, j1, d);
    case Isa::kScalar: return LoraExpandScalar(t, rows, rank, dtype, bt, out, j0, j1, d);
  }
}

}  // namespace loom::cpu
