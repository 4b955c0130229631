// LoRA shrink and expand kernels: scalar reference, the AVX-512 shrink (AVX-512 expand:
// lora_expand_avx512_cpu.cc; AVX2: lora_avx2_cpu.cc), and the dispatch.
#include "cpu/lora_cpu.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "cpu/widen16_avx512.h"

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

namespace {
// NR rows × NK ranks sharing their loads (NR·NK accumulators, in registers: compile-time
// extents); each accumulator sums its own row and rank over i in 16 lanes, the masked tail chunk
// last, then _mm512_reduce_add_ps: the order of a row's sums depends only on `in`. x: row 0 of
// the tile; a: A's row k0; t: t[row 0, k0], rows `rank` apart.
template <typename L, int NR, int NK>
LOOM_AVX512 void ShrinkTile(const float* x, int64_t in, const void* a, size_t a_row_elems, float* t,
                            int rank, const void* next) {
  const int64_t full = in / 16 * 16;
  __m512 acc[NR][NK];
  for (int i = 0; i < NR; ++i) {
    for (int q = 0; q < NK; ++q) acc[i][q] = _mm512_setzero_ps();
  }
  for (int64_t i0 = 0; i0 < full; i0 += 16) {
    if (NR == 1 && next != nullptr) {  // a decode row: the next tile's A rows, ahead of use
      for (int q = 0; q < NK; ++q) {
        _mm_prefetch(static_cast<const char*>(next) +
                         (q * a_row_elems + static_cast<size_t>(i0)) * sizeof(typename L::Elem),
                     _MM_HINT_T0);
      }
    }
    __m512 av[NK];
    for (int q = 0; q < NK; ++q)
      av[q] = L::Load(static_cast<const typename L::Elem*>(a) + q * a_row_elems + i0);
    for (int i = 0; i < NR; ++i) {
      const __m512 xv = _mm512_loadu_ps(x + i * in + i0);
      for (int q = 0; q < NK; ++q) acc[i][q] = _mm512_fmadd_ps(xv, av[q], acc[i][q]);
    }
  }
  if (full < in) {
    const __mmask16 m = static_cast<__mmask16>((1u << (in - full)) - 1);
    __m512 av[NK];
    for (int q = 0; q < NK; ++q)
      av[q] = L::LoadMasked(static_cast<const typename L::Elem*>(a) + q * a_row_elems + full, m);
    for (int i = 0; i < NR; ++i) {
      const __m512 xv = _mm512_maskz_loadu_ps(m, x + i * in + full);
      for (int q = 0; q < NK; ++q) acc[i][q] = _mm512_fmadd_ps(xv, av[q], acc[i][q]);
    }
  }
  for (int i = 0; i < NR; ++i) {
    for (int q = 0; q < NK; ++q) t[i * rank + q] = _mm512_reduce_add_ps(acc[i][q]);
  }
}

using ShrinkTileFn = void (*)(const float*, int64_t, const void*, size_t, float*, int, const void*);
template <typename L, int NR>
constexpr ShrinkTileFn kShrinkRow[4] = {&ShrinkTile<L, NR, 1>, &ShrinkTile<L, NR, 2>,
                                        &ShrinkTile<L, NR, 3>, &ShrinkTile<L, NR, 4>};

template <typename L>
LOOM_AVX512 void ShrinkAvx512(const float* x, int64_t rows, int64_t in, const void* a, int rank,
                              float* t) {
  constexpr size_t esize = sizeof(typename L::Elem);
  static constexpr const ShrinkTileFn* kTiles[4] = {kShrinkRow<L, 1>, kShrinkRow<L, 2>,
                                                    kShrinkRow<L, 3>, kShrinkRow<L, 4>};
  for (int64_t r = 0; r < rows; r += 4) {
    const int nr = static_cast<int>(std::min<int64_t>(rows - r, 4));
    for (int k = 0; k < rank; k += 4) {
      const int nk = std::min(rank - k, 4);
      const uint8_t* ak = static_cast<const uint8_t*>(a) + static_cast<size_t>(k * in) * esize;
      const uint8_t* next = k + 4 < rank ? ak + static_cast<size_t>(4 * in) * esize : nullptr;
      kTiles[nr - 1][nk - 1](x + r * in, in, ak, static_cast<size_t>(in), t + r * rank + k, rank,
                             static_cast<const void*>(next));
    }
  }
}
}  // namespace

// Blocks of up to 4 rows × 4 ranks share their loads (16 accumulators); each accumulator sums
// its own row and rank over i in 16 lanes, then _mm512_reduce_add_ps: the order of a row's sums
// depends only on `in`. One instantiation per A dtype and tile shape: the accumulators stay in
// registers (a tile with runtime extents kept them in memory).
LOOM_AVX512 void LoraShrinkAvx512(const float* x, int64_t rows, int64_t in, DType dtype,
                                  const void* a, int rank, float* t) {
  switch (dtype) {
    case DType::kF32:
      return ShrinkAvx512<Widen16F32>(x, rows, in, a, rank, t);
    case DType::kF16:
      return ShrinkAvx512<Widen16F16>(x, rows, in, a, rank, t);
    case DType::kBF16:
      return ShrinkAvx512<Widen16Bf16>(x, rows, in, a, rank, t);
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
