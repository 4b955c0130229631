// LoRA expand kernels at the AVX-512 level: register tiles of rows × 16-column panels with
// compile-time extents, one instantiation per B dtype, B streamed ahead for decode rows.
#include <immintrin.h>

#include <algorithm>

#include "cpu/lora_cpu.h"
#include "cpu/widen16_avx512.h"

// GCC 12 reports the intrinsics' own _mm512_undefined_*() pass-through operands as maybe
// uninitialized; they are fully overwritten.
#if !defined(__clang__)  // a gcc-only warning
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#pragma GCC diagnostic ignored "-Wuninitialized"

#define LOOM_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma,f16c")))

namespace loom::cpu {

namespace {

// NR rows × NC panels (16 columns each): NR·NC ≤ 16 accumulators. Every element: acc = 0;
// acc = fma(t[r, k], B[j, k], acc) in k order; then y = fma(scale, acc, y) (kAdd) or d = acc:
// the AVX2 kernel's arithmetic lane for lane, whatever the tile, so a row's bits depend on its
// own t only (batch invariance). b[c] is panel c's rank-0 row; rank k is 16 elements further
// each. Panels are whole (zero past `out`), so loads never need a mask; only the first `nc`
// panels are stored, the last of them under the mask `last` (the block's ragged end).
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

// What every strip of one call shares: B's panels, the columns [j, j1) from a panel start
// (column j of row 0 at y[j − y0]), and for decode rows the end of B up to which the panels
// `ahead` bytes past each group are prefetched (nullptr: no prefetch).
struct Strips {
  const char* bp;
  size_t panel_bytes, esize;
  int rank;
  __m512 vs;
  int64_t j, j1, y0, ldy;
  const char* prefetch_end;
  int64_t ahead;
};

// NR rows (t, y: row 0) over the call's columns, NC panels at a time (the last group may be
// partial).
template <bool kAdd, typename L, int NR, int NC>
LOOM_AVX512 void Strip(const Strips& s, const float* t, float* y) {
  for (int64_t j = s.j; j < s.j1; j += 16 * NC) {
    const char* b[NC];
    const char* first = s.bp + static_cast<size_t>(j / kLoraPanel) * s.panel_bytes;
    for (int c = 0; c < NC; ++c) b[c] = first + c * s.panel_bytes;
    const int64_t cols = std::min<int64_t>(16 * NC, s.j1 - j);
    const int nc = static_cast<int>((cols + 15) / 16);
    const int64_t tail = cols - 16 * (nc - 1);
    const __mmask16 full = static_cast<__mmask16>(0xffff);
    const __mmask16 last = tail == 16 ? full : static_cast<__mmask16>((1u << tail) - 1);
    if (s.prefetch_end != nullptr) {  // the panels `ahead` bytes past this group's, line by line
      const char* from = first + s.ahead;
      const char* to = std::min(s.prefetch_end, from + NC * s.panel_bytes);
      for (const char* p = from; p < to; p += 64) _mm_prefetch(p, _MM_HINT_T0);
    }
    float* yj = y + (j - s.y0);
    if (nc == NC) {
      Tile<kAdd, L, NR, NC>(t, s.rank, b, s.esize, s.vs, last, NC, yj, s.ldy);
    } else {  // fewer panels than the tile: never read past the block's last panel
      for (int c = 0; c < nc; ++c) {
        const char* one[1] = {b[c]};
        Tile<kAdd, L, NR, 1>(t, s.rank, one, s.esize, s.vs, c == nc - 1 ? last : full, 1,
                             yj + 16 * c, s.ldy);
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
  const size_t esize = DTypeSize(dtype);
  const char* bp = static_cast<const char*>(bt);
  // B up to the block's last panel: past it the panels are another block's (often another
  // thread's), and a decode step's prefetches there missed to DRAM.
  const char* end = bp + static_cast<size_t>(LoraPanelsSize(rank, j1)) * esize;
  Strips s{bp,
           static_cast<size_t>(kLoraPanel * rank) * esize,
           esize,
           rank,
           _mm512_set1_ps(scale),
           j,
           j1,
           kAdd ? 0 : j0,
           ldy,
           rows < 4 ? end : nullptr,
           4096};
  if (s.prefetch_end != nullptr) {
    const char* from = bp + static_cast<size_t>(j / kLoraPanel) * s.panel_bytes;
    for (const char* p = from; p < std::min(end, from + s.ahead); p += 64)
      _mm_prefetch(p, _MM_HINT_T0);
  }
  // The tile for 1..8 rows (index rows − 1).
  using StripFn = void (*)(const Strips&, const float*, float*);
  static constexpr StripFn kStrips[8] = {
      &Strip<kAdd, L, 1, 8>, &Strip<kAdd, L, 2, 4>, &Strip<kAdd, L, 3, 4>, &Strip<kAdd, L, 4, 4>,
      &Strip<kAdd, L, 5, 2>, &Strip<kAdd, L, 6, 2>, &Strip<kAdd, L, 7, 2>, &Strip<kAdd, L, 8, 2>};
  for (int64_t r = 0; r < rows; r += 8) {
    const float* tr = t + r * rank;
    float* yr = y + r * ldy;
    kStrips[std::min<int64_t>(rows - r, 8) - 1](s, tr, yr);
  }
}

template <bool kAdd>
LOOM_AVX512 void ExpandAny(const float* t, int64_t rows, int rank, DType dtype, const void* bt,
                           int64_t out, int64_t j0, int64_t j1, float scale, float* y,
                           int64_t ldy) {
  switch (dtype) {
    case DType::kF32:
      return Expand<kAdd, Widen16F32>(t, rows, rank, dtype, bt, out, j0, j1, scale, y, ldy);
    case DType::kF16:
      return Expand<kAdd, Widen16F16>(t, rows, rank, dtype, bt, out, j0, j1, scale, y, ldy);
    case DType::kBF16:
      return Expand<kAdd, Widen16Bf16>(t, rows, rank, dtype, bt, out, j0, j1, scale, y, ldy);
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
