// AVX512_BF16 matmul for bf16 weights (Isa::kAvx512Bf16, CPUs without AMX): vdpbf16ps tiles of
// 3 activation rows × 8 weight rows (2-8 rows over short weight rows: one weight row at a time),
// and the activation rounding to bf16 done once per call.
// GCC 12 warns falsely inside its own AVX-512 headers (_mm512_undefined_* in reductions).
#pragma GCC diagnostic ignored "-Wuninitialized"
#if !defined(__clang__)  // a gcc-only warning
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <algorithm>

#include "cpu/matmul_cpu.h"

#define LOOM_BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16")))

namespace loom::cpu {

namespace {

// Output y[i, j] is the sum over 16 lanes of lane l's running sum of the pairs at
// k = 32·s + 2l, 2l+1 (s = 0, 1, ...), each step one vdpbf16ps (then the lo pair with SPLIT),
// the lanes added by Reduce4 (columns in groups of 4) or _mm512_reduce_add_ps (a tail of 1-3
// columns). Every (row, column) takes exactly this sequence whatever tile it falls in, and the
// column tiles start at j0 (a multiple of 16 in the op), so a row's result never depends on how
// many rows are in the call: batch invariance.

LOOM_BF16 inline __m256 Half(__m512 v) {
  return _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
}

LOOM_BF16 inline __m128 Reduce4(__m512 a, __m512 b, __m512 c, __m512 d) {
  const __m256 h = _mm256_hadd_ps(_mm256_hadd_ps(Half(a), Half(b)), _mm256_hadd_ps(Half(c), Half(d)));
  return _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
}

template <int NI, int NJ>
LOOM_BF16 inline void Store(__m512 (&acc)[NI][NJ], float* y, int64_t ldy) {
  for (int a = 0; a < NI; ++a) {
    int b = 0;
    for (; b + 4 <= NJ; b += 4) {
      _mm_storeu_ps(y + a * ldy + b, Reduce4(acc[a][b], acc[a][b + 1], acc[a][b + 2], acc[a][b + 3]));
    }
    for (; b < NJ; ++b) y[a * ldy + b] = _mm512_reduce_add_ps(acc[a][b]);
  }
}

LOOM_BF16 inline __m512bh Load(const uint16_t* p) { return (__m512bh)_mm512_loadu_si512(p); }
LOOM_BF16 inline __m512bh LoadPart(const uint16_t* p, __mmask32 m) {
  return (__m512bh)_mm512_maskz_loadu_epi16(m, p);
}

// One tile: rows x[0..NI) (row stride k; lo residuals at x + lo_offset) × weight rows
// w[0..NJ) (stride k). PREFETCH: the first row tile over these weight rows pulls them from
// memory, and asks for the next tile's weight rows (the NJ rows after these, at the same offset)
// into L2: 8 short row streams (28 lines at k = 896) are more than the hardware prefetcher
// follows; later row tiles hit L1/L2. One row (decode) walks the weight rows one after another
// instead (the same products in the same order per output): a single sequential stream, which
// the hardware prefetcher follows at the memory's speed. bf16 decode, 0.5B shape, 2 threads,
// Zen 4 (docs/PERFORMANCE.md): batch 1 19.5-20.0 → 42.6-42.8 tok/s, batch 8 113-116 → 164-183
// (the first prefetch 1 KiB ahead in the same rows with _MM_HINT_T0 before).
template <int NI, int NJ, bool SPLIT, bool PREFETCH>
LOOM_BF16 void Tile(const uint16_t* x, int64_t lo_offset, int64_t k, const uint16_t* w, float* y,
                    int64_t ldy) {
  __m512 acc[NI][NJ];
  for (int a = 0; a < NI; ++a)
    for (int b = 0; b < NJ; ++b) acc[a][b] = _mm512_setzero_ps();
  const int64_t kfull = k & ~int64_t{31};
  if constexpr (NI == 1) {
    for (int b = 0; b < NJ; ++b) {
      for (int64_t p = 0; p < kfull; p += 32) {
        const __m512bh wv = Load(w + b * k + p);
        acc[0][b] = _mm512_dpbf16_ps(acc[0][b], Load(x + p), wv);
        if constexpr (SPLIT) acc[0][b] = _mm512_dpbf16_ps(acc[0][b], Load(x + lo_offset + p), wv);
      }
    }
  }
  for (int64_t p = 0; NI > 1 && p < kfull; p += 32) {
    if constexpr (PREFETCH) {
      for (int b = 0; b < NJ; ++b) {
        _mm_prefetch(reinterpret_cast<const char*>(w + (NJ + b) * k + p), _MM_HINT_T1);
      }
    }
    __m512bh xv[NI];
    for (int a = 0; a < NI; ++a) xv[a] = Load(x + a * k + p);
    if constexpr (SPLIT) {
      __m512bh xl[NI];
      for (int a = 0; a < NI; ++a) xl[a] = Load(x + lo_offset + a * k + p);
      for (int b = 0; b < NJ; ++b) {
        const __m512bh wv = Load(w + b * k + p);
        for (int a = 0; a < NI; ++a) {
          acc[a][b] = _mm512_dpbf16_ps(acc[a][b], xv[a], wv);
          acc[a][b] = _mm512_dpbf16_ps(acc[a][b], xl[a], wv);
        }
      }
    } else {
      for (int b = 0; b < NJ; ++b) {
        const __m512bh wv = Load(w + b * k + p);
        for (int a = 0; a < NI; ++a) acc[a][b] = _mm512_dpbf16_ps(acc[a][b], xv[a], wv);
      }
    }
  }
  if (kfull < k) {
    const __mmask32 m = static_cast<__mmask32>((uint64_t{1} << (k - kfull)) - 1);
    for (int b = 0; b < NJ; ++b) {
      const __m512bh wv = LoadPart(w + b * k + kfull, m);
      for (int a = 0; a < NI; ++a) {
        acc[a][b] = _mm512_dpbf16_ps(acc[a][b], LoadPart(x + a * k + kfull, m), wv);
        if constexpr (SPLIT) {
          acc[a][b] = _mm512_dpbf16_ps(acc[a][b], LoadPart(x + lo_offset + a * k + kfull, m), wv);
        }
      }
    }
  }
  Store<NI, NJ>(acc, y, ldy);
}

// Tile<NI, ...> at rows x, prefetching (the first row tile over these weight rows) or not.
template <int NI, int NJ, bool SPLIT>
LOOM_BF16 inline void TileAt(bool prefetch, const uint16_t* x, int64_t lo_offset, int64_t k,
                             const uint16_t* w, float* y, int64_t ldy) {
  if (prefetch) {
    Tile<NI, NJ, SPLIT, true>(x, lo_offset, k, w, y, ldy);
  } else {
    Tile<NI, NJ, SPLIT, false>(x, lo_offset, k, w, y, ldy);
  }
}

// Rows [0, n) over NJ weight rows, NI rows at a time (the first tile prefetching), then two rows
// (NI = 3: 8 rows as 3 + 3 + 2, not 3 + 3 + 1 + 1, which read the weights from L1 once more),
// then one at a time.
template <int NI, int NJ, bool SPLIT>
LOOM_BF16 void Rows(const uint16_t* x, int64_t lo_offset, int64_t n, int64_t k, const uint16_t* w,
                    float* y, int64_t ldy, bool first_chunk) {
  int64_t i = 0;
  for (; i + NI <= n; i += NI) {
    TileAt<NI, NJ, SPLIT>(first_chunk && i == 0, x + i * k, lo_offset, k, w, y + i * ldy, ldy);
  }
  if constexpr (NI == 3) {
    if (n - i == 2) {
      TileAt<2, NJ, SPLIT>(first_chunk && i == 0, x + i * k, lo_offset, k, w, y + i * ldy, ldy);
      i += 2;
    }
  }
  for (; i < n; ++i) Tile<1, NJ, SPLIT, false>(x + i * k, lo_offset, k, w, y + i * ldy, ldy);
}

// One column's lanes added in exactly Reduce4's order for that column (the 256-bit halves, then
// adjacent pairs twice, then the 128-bit halves), so a column reduced alone has Reduce4's bits.
LOOM_BF16 inline float Reduce1(__m512 v) {
  __m256 t = Half(v);
  t = _mm256_hadd_ps(t, t);
  t = _mm256_hadd_ps(t, t);
  return _mm_cvtss_f32(_mm_add_ss(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1)));
}

// NI rows (2..8, no lo residuals) over weight rows [j0, j1) one after another: each weight row is
// read once, by one sequential stream, against every activation row (from L1). The products and
// their order per output are those of Tile, and a column takes Reduce4's order where Kernel puts
// it in a group of 4 (the 8- and 4-wide tiles from j0), _mm512_reduce_add_ps in the tail.
template <int NI>
LOOM_BF16 void Columns(const uint16_t* x, int64_t k, const uint16_t* w, int64_t j0, int64_t j1,
                       float* y, int64_t ldy) {
  const int64_t kfull = k & ~int64_t{31};
  const int64_t grouped_end = j0 + (j1 - j0) / 4 * 4;
  const __mmask32 m = static_cast<__mmask32>((uint64_t{1} << (k - kfull)) - 1);
  for (int64_t j = j0; j < j1; ++j) {
    const uint16_t* wj = w + j * k;
    __m512 acc[NI];
    for (int a = 0; a < NI; ++a) acc[a] = _mm512_setzero_ps();
    for (int64_t p = 0; p < kfull; p += 32) {
      const __m512bh wv = Load(wj + p);
      for (int a = 0; a < NI; ++a) acc[a] = _mm512_dpbf16_ps(acc[a], Load(x + a * k + p), wv);
    }
    if (kfull < k) {
      const __m512bh wv = LoadPart(wj + kfull, m);
      for (int a = 0; a < NI; ++a) {
        acc[a] = _mm512_dpbf16_ps(acc[a], LoadPart(x + a * k + kfull, m), wv);
      }
    }
    if (j < grouped_end) {
      for (int a = 0; a < NI; ++a) y[a * ldy + j] = Reduce1(acc[a]);
    } else {
      for (int a = 0; a < NI; ++a) y[a * ldy + j] = _mm512_reduce_add_ps(acc[a]);
    }
  }
}

// 2-8 rows over short weight rows (k ≤ 1024) whose activations fit in ~14 KiB of L1: Columns, one
// weight stream. Measured on a Zen 4 (BM_Matmul cold, 2 threads): 8 × (4864 × 896) 370-427 →
// 341-376 µs, 2 and 4 rows ~10 % faster; decode at 8 rows of the 0.5B shape +6-9 %. Longer rows
// stream well as Tile's 8 side by side (3 × (8192 × 2048): 850 µs there, 1,250-1,350 here), and
// 8 activation rows of 1,536 or more spill out of L1 (2× slower).
__attribute__((noinline)) LOOM_BF16 bool FewRows(const uint16_t* x, int64_t n, int64_t k,
                                                 const uint16_t* w, int64_t j0, int64_t j1,
                                                 float* y, int64_t ldy) {
  if (k > 1024 || n * k > 7 * 1024) return false;  // and n outside 2-8: below
  switch (n) {
    case 2:
      Columns<2>(x, k, w, j0, j1, y, ldy);
      return true;
    case 3:
      Columns<3>(x, k, w, j0, j1, y, ldy);
      return true;
    case 4:
      Columns<4>(x, k, w, j0, j1, y, ldy);
      return true;
    case 5:
      Columns<5>(x, k, w, j0, j1, y, ldy);
      return true;
    case 6:
      Columns<6>(x, k, w, j0, j1, y, ldy);
      return true;
    case 7:
      Columns<7>(x, k, w, j0, j1, y, ldy);
      return true;
    case 8:
      Columns<8>(x, k, w, j0, j1, y, ldy);
      return true;
    default:
      return false;
  }
}

// NI rows per tile: 3 × 8 = 24 accumulators + 3 activation + 1 weight register (single);
// 2 × 8 with the lo residuals (SPLIT) in 4 more registers.
template <bool SPLIT>
LOOM_BF16 void Kernel(const uint16_t* x, int64_t lo_offset, int64_t n, int64_t k, const uint16_t* w,
                      int64_t j0, int64_t j1, float* y, int64_t ldy) {
  constexpr int NI = SPLIT ? 2 : 3;
  // Row chunks whose activations (hi and lo) stay in L2 (~768 KiB) while every weight tile of
  // [j0, j1) passes over them.
  const int64_t row_bytes = k * 2 * (SPLIT ? 2 : 1);
  int64_t chunk = std::max<int64_t>(NI, (int64_t{768} << 10) / std::max<int64_t>(1, row_bytes));
  chunk = chunk / NI * NI;
  for (int64_t r0 = 0; r0 < n; r0 += chunk) {
    const int64_t rn = std::min(chunk, n - r0);
    const uint16_t* xr = x + r0 * k;
    float* yr = y + r0 * ldy;
    const bool first = r0 == 0;
    int64_t j = j0;
    for (; j + 8 <= j1; j += 8) Rows<NI, 8, SPLIT>(xr, lo_offset, rn, k, w + j * k, yr + j, ldy, first);
    if (j + 4 <= j1) {
      Rows<NI, 4, SPLIT>(xr, lo_offset, rn, k, w + j * k, yr + j, ldy, first);
      j += 4;
    }
    for (; j < j1; ++j) Rows<NI, 1, SPLIT>(xr, lo_offset, rn, k, w + j * k, yr + j, ldy, first);
  }
}

// bf16 of 16 floats, round to nearest even with NaN quieted: bit-identical to F32ToBf16.
LOOM_BF16 inline __m256i RoundBf16(__m512i bits) {
  const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(bits, _mm512_set1_epi32(0x7fffffff)),
                                                _mm512_set1_epi32(0x7f800000));
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
  __m512i r = _mm512_srli_epi32(_mm512_add_epi32(bits, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff))), 16);
  r = _mm512_mask_mov_epi32(r, nan, _mm512_or_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(0x40)));
  return _mm512_cvtepi32_epi16(r);
}

}  // namespace

LOOM_BF16 void MatmulBf16Avx512(const uint16_t* x, const uint16_t* x_lo, int64_t n, int64_t k,
                                const uint16_t* w, int64_t j0, int64_t j1, float* y, int64_t ldy) {
  if (x_lo) return Kernel<true>(x, x_lo - x, n, k, w, j0, j1, y, ldy);
  if (n > 1 && FewRows(x, n, k, w, j0, j1, y, ldy)) return;
  Kernel<false>(x, 0, n, k, w, j0, j1, y, ldy);
}

LOOM_BF16 void RoundToBf16Avx512(const float* x, int64_t count, uint16_t* hi, uint16_t* lo) {
  int64_t i = 0;
  for (; i + 16 <= count; i += 16) {
    const __m512 v = _mm512_loadu_ps(x + i);
    const __m256i h = RoundBf16(_mm512_castps_si512(v));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(hi + i), h);
    if (lo) {
      const __m512 hf = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
      const __m256i l = RoundBf16(_mm512_castps_si512(_mm512_sub_ps(v, hf)));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(lo + i), l);
    }
  }
  for (; i < count; ++i) {
    hi[i] = F32ToBf16(x[i]);
    if (lo) lo[i] = F32ToBf16(x[i] - Bf16ToF32(hi[i]));
  }
}

}  // namespace loom::cpu
