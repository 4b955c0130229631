// LoRA shrink and expand kernels at the AVX2 level (8-lane f32 FMA): register tiles with compile-time extents, one instantiation per weight dtype.
#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "cpu/avx2_reduce.h"
#include "cpu/avx2_widen.h"
#include "cpu/lora_cpu.h"

#define LOOM_AVX2 __attribute__((target("avx2,fma,f16c")))

namespace loom::cpu {

namespace {

inline float Load1(DType dtype, const void* p, int64_t i) {
  switch (dtype) {
    case DType::kF32: return static_cast<const float*>(p)[i];
    case DType::kF16: return F16ToF32(static_cast<const uint16_t*>(p)[i]);
    case DType::kBF16: return Bf16ToF32(static_cast<const uint16_t*>(p)[i]);
  }
  return 0;
}

// 8 consecutive values of A or Bᵀ widened to f32, one type per instantiation (a dtype switch in
// the loop cost a compare and a branch per load).
struct WidenF32 {
  LOOM_AVX2 static __m256 Load(const void* p, int64_t i) { return _mm256_loadu_ps(static_cast<const float*>(p) + i); }
};
struct WidenF16 {
  LOOM_AVX2 static __m256 Load(const void* p, int64_t i) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(p) + i)));
  }
};
struct WidenBf16 {
  LOOM_AVX2 static __m256 Load(const void* p, int64_t i) {
    return Bf16x8ToF32(static_cast<const uint16_t*>(p) + i);
  }
};

// Expand, every element: acc = 0; acc = fma(t[r][k], B[j][k], acc) in k order; then
// y = fma(scale, acc, y) (or d = acc): the AVX-512 kernel's arithmetic lane for lane (the edge
// columns use fmaf, the same single rounding), whatever the tile, so each row's value depends on
// its own t only (batch invariance).
//
// NR ≤ 4 rows × NC ≤ 3 column vectors (24 columns): 12 accumulators, 3 B vectors and one
// broadcast t, AVX2's 16 registers. Column vector c's rank-k values are at b[c] + k·kLoraPanel
// (8 columns of one panel), read by L. Always inlined: called per tile, its accumulators went
// through the stack (−10 % at 128 rows).
template <bool kAdd, typename L, int NR, int NC>
LOOM_AVX2 inline __attribute__((always_inline)) void ExpandTile(const float* t, int rank,
                                                                const char* const* b,
                                                                float scale, float* y,
                                                                int64_t ldy) {
  __m256 acc[NR][NC];
  for (int i = 0; i < NR; ++i) {
    for (int c = 0; c < NC; ++c) acc[i][c] = _mm256_setzero_ps();
  }
  for (int k = 0; k < rank; ++k) {
    __m256 bv[NC];
    for (int c = 0; c < NC; ++c) bv[c] = L::Load(b[c], int64_t{k} * kLoraPanel);
    for (int i = 0; i < NR; ++i) {
      const __m256 tv = _mm256_set1_ps(t[i * rank + k]);
      for (int c = 0; c < NC; ++c) acc[i][c] = _mm256_fmadd_ps(tv, bv[c], acc[i][c]);
    }
  }
  const __m256 vs = _mm256_set1_ps(scale);
  for (int i = 0; i < NR; ++i) {
    for (int c = 0; c < NC; ++c) {
      float* yr = y + i * ldy + 8 * c;
      _mm256_storeu_ps(yr, kAdd ? _mm256_fmadd_ps(vs, acc[i][c], _mm256_loadu_ps(yr)) : acc[i][c]);
    }
  }
}

// 8·NC columns for every row, 4 rows at a time.
template <bool kAdd, typename L, int NC>
LOOM_AVX2 void ExpandStrip(const float* t, int64_t rows, int rank, const char* const* b,
                           float scale, float* y, int64_t ldy) {
  int64_t r = 0;
  for (; r + 4 <= rows; r += 4) {
    ExpandTile<kAdd, L, 4, NC>(t + r * rank, rank, b, scale, y + r * ldy, ldy);
  }
  const float* tr = t + r * rank;
  float* yr = y + r * ldy;
  switch (rows - r) {
    case 3: return ExpandTile<kAdd, L, 3, NC>(tr, rank, b, scale, yr, ldy);
    case 2: return ExpandTile<kAdd, L, 2, NC>(tr, rank, b, scale, yr, ldy);
    case 1: return ExpandTile<kAdd, L, 1, NC>(tr, rank, b, scale, yr, ldy);
    default: return;
  }
}

// After the columns before the first whole panel (one by one), strips of 24 columns, then 8,
// then single columns: 4 rows × 24 columns per tile, 7 loads per
// 12 fmas (4 × 8 tiles: 5 per 4), one type per instantiation. 128 rows × 320 columns × rank 16
// (bf16 Bᵀ, one Zen 2 core): 22.5 → 79 GFLOP/s; 4 rows × 896: 21.8 → 78; 1 row: 7.7 → 34.
// Widening a 24-column strip of Bᵀ to f32 once per strip measured +5 % at 128 rows and −10 % at
// 16, so B is widened where it is used.
template <bool kAdd, typename L>
LOOM_AVX2 void Expand(const float* t, int64_t rows, int rank, DType dtype, const void* bp,
                      int64_t out, int64_t j0, int64_t j1, float scale, float* y, int64_t ldy) {
  (void)out;
  const size_t esize = DTypeSize(dtype);
  // Column j's rank-0 value (j a multiple of 8: its 8 columns lie in one panel).
  auto at = [&](int64_t j) {
    return static_cast<const char*>(bp) + static_cast<size_t>(LoraPanelIndex(rank, 0, j)) * esize;
  };
  auto yat = [&](int64_t j) { return y + (kAdd ? j : j - j0); };
  int64_t j = LoraExpandHead(t, rows, rank, dtype, bp, j0, j1, kAdd, scale, y, ldy);
  // Decode rows (fewer than 4: one per adapter) use each B value once, so the expand streams B
  // from DRAM right after the block's base weights, a short stream per adapter (10 KiB for a
  // 320-column block at rank 16 bf16) that the hardware prefetcher picks up late. Fetch ~4 KiB
  // ahead of the strip being computed (past the block's end too: the adapter's next block) and
  // that first 4 KiB on entry. Zen 3, avx2, interleaved with the same build without it: one
  // adapter over int4 at batch 1 decoded at 0.86–0.87 → 0.89–0.91 of base (`loom bench --lora`,
  // medians of 9 repeats, 3 rounds); 8 adapters at batch 8 unchanged within noise (the
  // 4864 × 896 projection alone, 8 one-row adapters, 24 layers from DRAM: 0.70–0.72 → 0.72–0.74
  // of its base time). Prefetches change no value.
  const char* bytes = static_cast<const char*>(bp);
  const size_t panel_bytes = static_cast<size_t>(kLoraPanel * rank) * esize;
  const size_t total_bytes = static_cast<size_t>(LoraPanelsSize(rank, out)) * esize;
  const int64_t ahead = std::max<int64_t>(kLoraPanel, 4096 / static_cast<int64_t>(panel_bytes) * kLoraPanel);
  auto prefetch = [&](int64_t c0, int64_t c1) {  // the panels holding columns [c0, c1)
    const size_t to = std::min(total_bytes, static_cast<size_t>((c1 + kLoraPanel - 1) / kLoraPanel) * panel_bytes);
    for (size_t o = static_cast<size_t>(c0 / kLoraPanel) * panel_bytes; o < to; o += 64) {
      _mm_prefetch(bytes + o, _MM_HINT_T0);
    }
  };
  const bool stream = rows < 4;
  if (stream) prefetch(j, std::min(j1, j + ahead));
  for (; j + 24 <= j1; j += 24) {
    if (stream) prefetch(j + ahead, j + ahead + 24);
    const char* b[3] = {at(j), at(j + 8), at(j + 16)};
    ExpandStrip<kAdd, L, 3>(t, rows, rank, b, scale, yat(j), ldy);
  }
  for (; j + 8 <= j1; j += 8) {
    const char* b[1] = {at(j)};
    ExpandStrip<kAdd, L, 1>(t, rows, rank, b, scale, yat(j), ldy);
  }
  for (; j < j1; ++j) {
    for (int64_t r = 0; r < rows; ++r) {
      float acc = 0;
      for (int k = 0; k < rank; ++k) acc = std::fma(t[r * rank + k], Load1(dtype, bp, LoraPanelIndex(rank, k, j)), acc);
      float* yr = yat(j) + r * ldy;
      *yr = kAdd ? std::fma(scale, acc, *yr) : acc;
    }
  }
}

template <bool kAdd>
LOOM_AVX2 void ExpandAny(const float* t, int64_t rows, int rank, DType dtype, const void* bt,
                         int64_t out, int64_t j0, int64_t j1, float scale, float* y, int64_t ldy) {
  switch (dtype) {
    case DType::kF32: return Expand<kAdd, WidenF32>(t, rows, rank, dtype, bt, out, j0, j1, scale, y, ldy);
    case DType::kF16: return Expand<kAdd, WidenF16>(t, rows, rank, dtype, bt, out, j0, j1, scale, y, ldy);
    case DType::kBF16: return Expand<kAdd, WidenBf16>(t, rows, rank, dtype, bt, out, j0, j1, scale, y, ldy);
  }
}

}  // namespace

LOOM_AVX2 void LoraExpandAvx2(const float* t, int64_t rows, int rank, DType dtype, const void* bt,
                              int64_t out, int64_t j0, int64_t j1, float* d) {
  ExpandAny<false>(t, rows, rank, dtype, bt, out, j0, j1, 1.0f, d, j1 - j0);
}

LOOM_AVX2 void LoraExpandAddAvx2(const float* t, int64_t rows, int rank, DType dtype, const void* bt,
                                 int64_t out, int64_t j0, int64_t j1, float scale, float* y,
                                 int64_t ldy) {
  ExpandAny<true>(t, rows, rank, dtype, bt, out, j0, j1, scale, y, ldy);
}

namespace {

// NR ≤ 3 rows × NK ≤ 4 ranks: 12 accumulators, NR activation vectors and one A vector at a time,
// AVX2's 16 registers. The extents and A's type are template arguments so the accumulators stay
// in registers (with runtime counts GCC kept them on the stack, and a 3 × 4 tile that held 4 A
// vectors at once needed 17 registers and spilled one): 128 rows × 896 inputs × rank 16 went
// 34.5 → 76 GFLOP/s on one Zen 2 core. Each accumulator sums its row and rank over i in 8 lanes,
// then the lanes, then the tail i ≥ in/8·8 in order: a row's sums depend on `in` only, never on
// how many rows share the call.
template <typename L, int NR, int NK>
LOOM_AVX2 void ShrinkTile(const float* x, int64_t in, DType dtype, const void* a, int k, int rank,
                          float* t) {
  const int64_t full = in / 8 * 8;
  __m256 acc[NR][NK];
  for (int i = 0; i < NR; ++i) {
    for (int q = 0; q < NK; ++q) acc[i][q] = _mm256_setzero_ps();
  }
  for (int64_t i0 = 0; i0 < full; i0 += 8) {
    __m256 xv[NR];
    for (int i = 0; i < NR; ++i) xv[i] = _mm256_loadu_ps(x + i * in + i0);
    for (int q = 0; q < NK; ++q) {
      const __m256 av = L::Load(a, int64_t{k + q} * in + i0);
      for (int i = 0; i < NR; ++i) acc[i][q] = _mm256_fmadd_ps(xv[i], av, acc[i][q]);
    }
  }
  for (int i = 0; i < NR; ++i) {
    for (int q = 0; q < NK; ++q) {
      float s = Sum8(acc[i][q]);
      for (int64_t p = full; p < in; ++p) s += x[i * in + p] * Load1(dtype, a, int64_t{k + q} * in + p);
      t[i * rank + k + q] = s;
    }
  }
}

template <typename L, int NR>
LOOM_AVX2 void ShrinkRows(const float* x, int64_t in, DType dtype, const void* a, int rank,
                          float* t) {
  int k = 0;
  for (; k + 4 <= rank; k += 4) ShrinkTile<L, NR, 4>(x, in, dtype, a, k, rank, t);
  switch (rank - k) {
    case 3: return ShrinkTile<L, NR, 3>(x, in, dtype, a, k, rank, t);
    case 2: return ShrinkTile<L, NR, 2>(x, in, dtype, a, k, rank, t);
    case 1: return ShrinkTile<L, NR, 1>(x, in, dtype, a, k, rank, t);
    default: return;
  }
}

template <typename L>
LOOM_AVX2 void Shrink(const float* x, int64_t rows, int64_t in, DType dtype, const void* a,
                      int rank, float* t) {
  int64_t r = 0;
  for (; r + 3 <= rows; r += 3) ShrinkRows<L, 3>(x + r * in, in, dtype, a, rank, t + r * rank);
  if (rows - r == 2) ShrinkRows<L, 2>(x + r * in, in, dtype, a, rank, t + r * rank);
  if (rows - r == 1) ShrinkRows<L, 1>(x + r * in, in, dtype, a, rank, t + r * rank);
}

}  // namespace

LOOM_AVX2 void LoraShrinkAvx2(const float* x, int64_t rows, int64_t in, DType dtype, const void* a,
                              int rank, float* t) {
  switch (dtype) {
    case DType::kF32: return Shrink<WidenF32>(x, rows, in, dtype, a, rank, t);
    case DType::kF16: return Shrink<WidenF16>(x, rows, in, dtype, a, rank, t);
    case DType::kBF16: return Shrink<WidenBf16>(x, rows, in, dtype, a, rank, t);
  }
}

}  // namespace loom::cpu
