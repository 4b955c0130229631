// LoRA expand kernels at the AVX-512 level: register tiles of rows × 16-column panels with
// compile-time extents, one instantiation per B dtype, B streamed ahead for decode rows.
#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "cpu/lora_cpu.h"

#define LOOM_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma,f16c")))

namespace loom::cpu {

namespace {

// One panel row (16 columns of one rank) widened to f32, one type per instantiation: the old
// kernel's dtype switch and index arithmetic per load made a decode row's expand run at 10.8
// multiply-adds per ns on one core, hot in L1 (BM_LoraExpandAdd/1).
struct Panel16F32 {
  LOOM_AVX512 static __m512 Load(const void* p) { return _mm512_loadu_ps(p); }
};
struct Panel16F16 {
  LOOM_AVX512 static __m512 Load(const void* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(static_cast<const __m256i*>(p)));
  }
};
struct Panel16Bf16 {
  LOOM_AVX512 static __m512 Load(const void* p) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(
        _mm512_cvtepu16_epi32(_mm256_loadu_si256(static_cast<const __m256i*>(p))), 16));
  }
};

// NR rows × NC panels (16 columns each): NR·NC ≤ 16 accumulators. Every element: acc = 0;
// acc = fma(t[r, k], B[j, k], acc) in k order; then y = fma(scale, acc, y) (kAdd) or d = acc:
// the AVX2 kernel's arithmetic lane for lane, whatever the tile, so a row's bits depend on its
// own t only (batch invariance). b[c] is panel c's rank-0 row; rank k is 16 elements further
// each. Panels are whole (zero past `out`), so loads never need a mask; `m` masks the stores of
// the last panel of the block.
template <bool kAdd, typename L, int NR, int NC>
LOOM_AVX512 inline __attribute__((always_inline)) void Tile(const float* t, int rank,
                                                            const char* const* b, size_t esize,
                                                            __m512 vs, __mmask16 last, int nc,
                                                            float* y, int64_t ldy) {
  __m512 acc[NR][NC];
  for (int i = 0; i < NR; ++i) {
    for (int c = 0; c < NC; ++c) acc[i][c] = _mm512_setzero_ps();
  }
  const size_t step = kLoraPanel * esize;
  for (int k = 0; k < rank; ++k) {
    __m512 bv[NC];
    for (int c = 0; c < NC; ++c) bv[c] = L::Load(b[c] + static_cast<size_t>(k) * step);
    for (int i = 0; i < NR; ++i) {
      const __m512 tv = _mm512_set1_ps(t[i * rank + k]);
      for (int c = 0; c < NC; ++c) acc[i][c] = _mm512_fmadd_ps(tv, bv[c], acc[i][c]);
    }
  }
  for (int i = 0; i < NR; ++i) {
    for (int c = 0; c < NC && c < nc; ++c) {
      const __mmask16 m = c == nc - 1 ? last : static_cast<__mmask16>(0xffff);
      float* yr = y + i * ldy + 16 * c;
      const __m512 v =
          kAdd ? _mm512_fmadd_ps(vs, acc[i][c], _mm512_maskz_loadu_ps(m, yr)) : acc[i][c];
      _mm512_mask_storeu_ps(yr, m, v);
    }
  }
}

// Columns [j, j1) from a panel start, NC panels at a time (the last group may be partial);
// column j of row 0 is y[j − y0].
template <bool kAdd, typename L, int NR, int NC>
LOOM_AVX512 void Strip(const float* t, int rank, const char* bp, size_t panel_bytes, size_t esize,
                       __m512 vs, int64_t j, int64_t j1, float* y, int64_t y0, int64_t ldy,
                       const char* prefetch_end, int64_t ahead_bytes) {
  for (; j < j1; j += 16 * NC) {
    const char* b[NC];
    const char* first = bp + static_cast<size_t>(j / kLoraPanel) * panel_bytes;
    for (int c = 0; c < NC; ++c) b[c] = first + c * panel_bytes;
    const int64_t cols = std::min<int64_t>(16 * NC, j1 - j);
    const int nc = static_cast<int>((cols + 15) / 16);
    const int64_t tail = cols - 16 * (nc - 1);
    const __mmask16 last =
        tail == 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << tail) - 1);
    if (prefetch_end != nullptr) {  // the panels ahead_bytes past this group's, line by line
      const char* from = first + ahead_bytes;
      const char* to = std::min(prefetch_end, from + NC * panel_bytes);
      for (const char* p = from; p < to; p += 64) _mm_prefetch(p, _MM_HINT_T0);
    }
    if (nc == NC) {
      Tile<kAdd, L, NR, NC>(t, rank, b, esize, vs, last, NC, y + (j - y0), ldy);
    } else {  // fewer panels than the tile: never read past the block's last panel
      for (int c = 0; c < nc; ++c) {
        const char* one[1] = {b[c]};
        Tile<kAdd, L, NR, 1>(t, rank, one, esize, vs,
                             c == nc - 1 ? last : static_cast<__mmask16>(0xffff), 1,
                             y + (j - y0) + 16 * c, ldy);
      }
    }
  }
}

// After the head columns (one by one up to a panel start): tiles of 1×8, 2×4, 3×4, 4×4 and
// 5..8 × 2 panels (NR·NC accumulators plus NC B vectors within 32 registers). Decode rows (fewer
// than 4: one per adapter) use each B value once: B is streamed from DRAM right after the
// block's base weights, so it is fetched ~4 KiB ahead of the panels being computed (and that
// first 4 KiB on entry), as the AVX2 kernel does.
template <bool kAdd, typename L>
LOOM_AVX512 void Expand(const float* t, int64_t rows, int rank, DType dtype, const void* bt,
                        int64_t out, int64_t j0, int64_t j1, float scale, float* y, int64_t ldy) {
  const int64_t j = LoraExpandHead(t, rows, rank, dtype, bt, j0, j1, kAdd, scale, y, ldy);
  if (j >= j1) return;
  const int64_t y0 = kAdd ? 0 : j0;  // column j of row 0 is y[j − y0]
  const size_t esize = DTypeSize(dtype);
  const size_t panel_bytes = static_cast<size_t>(kLoraPanel * rank) * esize;
  const char* bp = static_cast<const char*>(bt);
  const char* end = bp + static_cast<size_t>(LoraPanelsSize(rank, out)) * esize;
  const int64_t ahead = 4096;
  const char* prefetch_end = nullptr;
  if (rows < 4) {
    prefetch_end = end;
    const char* from = bp + static_cast<size_t>(j / kLoraPanel) * panel_bytes;
    for (const char* p = from; p < std::min(end, from + ahead); p += 64)
      _mm_prefetch(p, _MM_HINT_T0);
  }
  const __m512 vs = _mm512_set1_ps(scale);
  for (int64_t r = 0; r < rows; r += 8) {
    const float* tr = t + r * rank;
    float* yr = y + r * ldy;
    switch (rows - r < 8 ? rows - r : 8) {
      case 1:
        Strip<kAdd, L, 1, 8>(tr, rank, bp, panel_bytes, esize, vs, j, j1, yr, y0, ldy, prefetch_end,
                             ahead);
        break;
      case 2:
        Strip<kAdd, L, 2, 4>(tr, rank, bp, panel_bytes, esize, vs, j, j1, yr, y0, ldy, prefetch_end,
                             ahead);
        break;
      case 3:
        Strip<kAdd, L, 3, 4>(tr, rank, bp, panel_bytes, esize, vs, j, j1, yr, y0, ldy, prefetch_end,
                             ahead);
        break;
      case 4:
        Strip<kAdd, L, 4, 4>(tr, rank, bp, panel_bytes, esize, vs, j, j1, yr, y0, ldy, nullptr,
                             ahead);
        break;
      case 5:
        Strip<kAdd, L, 5, 2>(tr, rank, bp, panel_bytes, esize, vs, j, j1, yr, y0, ldy, nullptr,
                             ahead);
        break;
      case 6:
        Strip<kAdd, L, 6, 2>(tr, rank, bp, panel_bytes, esize, vs, j, j1, yr, y0, ldy, nullptr,
                             ahead);
        break;
      case 7:
        Strip<kAdd, L, 7, 2>(tr, rank, bp, panel_bytes, esize, vs, j, j1, yr, y0, ldy, nullptr,
                             ahead);
        break;
      default:
        Strip<kAdd, L, 8, 2>(tr, rank, bp, panel_bytes, esize, vs, j, j1, yr, y0, ldy, nullptr,
                             ahead);
        break;
    }
  }
}

template <bool kAdd>
LOOM_AVX512 void ExpandAny(const float* t, int64_t rows, int rank, DType dtype, const void* bt,
                           int64_t out, int64_t j0, int64_t j1, float scale, float* y,
                           int64_t ldy) {
  switch (dtype) {
    case DType::kF32:
      return Expand<kAdd, Panel16F32>(t, rows, rank, dtype, bt, out, j0, j1, scale, y, ldy);
    case DType::kF16:
      return Expand<kAdd, Panel16F16>(t, rows, rank, dtype, bt, out, j0, j1, scale, y, ldy);
    case DType::kBF16:
      return Expand<kAdd, Panel16Bf16>(t, rows, rank, dtype, bt, out, j0, j1, scale, y, ldy);
  }
}

}  // namespace

LOOM_AVX512 void LoraExpandAvx512(const float* t, int64_t rows, int rank, DType dtype,
                                  const void* bt, int64_t out, int64_t j0, int64_t j1, float* d) {
  ExpandAny<false>(t, rows, rank, dtype, bt, out, j0, j1, 1.0f, d, j1 - j0);
}

LOOM_AVX512 void LoraExpandAddAvx512(const float* t, int64_t rows, int rank, DType dtype,
                                     const void* bt, int64_t out, int64_t j0, int64_t j1,
                                     float scale, float* y, int64_t ldy) {
  ExpandAny<true>(t, rows, rank, dtype, bt, out, j0, j1, scale, y, ldy);
}

}  // namespace loom::cpu
