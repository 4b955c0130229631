// NF4 matmul with AVX2: each 16-column panel as two 8-lane halves; the 16-entry code table looked
// up with two vpermps and a blend on index bit 3; the same fma sequence as the scalar kernel.
#include <immintrin.h>

#include "cpu/nf4_cpu.h"

#define LOOM_AVX2 __attribute__((target("avx2,fma")))

namespace loom::cpu {

namespace {

// code[idx & 15] per lane: vpermps reads bits 2..0; `sign` carries bit 3 in its sign bit.
LOOM_AVX2 inline __m256 Lookup(__m256i idx, __m256i sign, __m256 lo, __m256 hi) {
  return _mm256_blendv_ps(_mm256_permutevar8x32_ps(lo, idx), _mm256_permutevar8x32_ps(hi, idx),
                          _mm256_castsi256_ps(sign));
}

// R rows × P panels from panel p0, `cols` valid columns in the tile's last panel; per (row,
// column) MatmulNf4's contract (nf4_cpu.h), so the scalar kernel's bits.
template <int R, int P>
LOOM_AVX2 inline void Tile(const float* x, int64_t k, const uint8_t* wq, const float* absmax,
                           int64_t block, int64_t p0, int cols, float* y, int64_t ldy) {
  const int64_t blocks = k / block, panel_bytes = kNf4Panel * k / 2;
  const __m256 lut_lo = _mm256_loadu_ps(kNf4Code), lut_hi = _mm256_loadu_ps(kNf4Code + 8);
  __m256 acc[R][P][2];
  for (int r = 0; r < R; ++r) {
    for (int p = 0; p < P; ++p) acc[r][p][0] = acc[r][p][1] = _mm256_setzero_ps();
  }
  for (int64_t b = 0; b < blocks; ++b) {
    __m256 t[R][P][2];
    for (int r = 0; r < R; ++r) {
      for (int p = 0; p < P; ++p) t[r][p][0] = t[r][p][1] = _mm256_setzero_ps();
    }
    for (int64_t i = b * block; i < (b + 1) * block; i += 2) {
      __m256 w0[P][2], w1[P][2];
      for (int p = 0; p < P; ++p) {
        const uint8_t* chunk = wq + (p0 + p) * panel_bytes + (i / 2) * kNf4Panel;
        for (int h = 0; h < 2; ++h) {
          const __m256i v = _mm256_cvtepu8_epi32(
              _mm_loadl_epi64(reinterpret_cast<const __m128i*>(chunk + 8 * h)));
          w0[p][h] = Lookup(v, _mm256_slli_epi32(v, 28), lut_lo, lut_hi);  // low nibble
          w1[p][h] = Lookup(_mm256_srli_epi32(v, 4), _mm256_slli_epi32(v, 24), lut_lo, lut_hi);
        }
      }
      for (int r = 0; r < R; ++r) {
        const __m256 x0 = _mm256_set1_ps(x[r * k + i]);
        const __m256 x1 = _mm256_set1_ps(x[r * k + i + 1]);
        for (int p = 0; p < P; ++p) {
          for (int h = 0; h < 2; ++h) {
            t[r][p][h] = _mm256_fmadd_ps(w0[p][h], x0, t[r][p][h]);
            t[r][p][h] = _mm256_fmadd_ps(w1[p][h], x1, t[r][p][h]);
          }
        }
      }
    }
    for (int p = 0; p < P; ++p) {
      for (int h = 0; h < 2; ++h) {
        const __m256 am = _mm256_loadu_ps(absmax + ((p0 + p) * blocks + b) * kNf4Panel + 8 * h);
        for (int r = 0; r < R; ++r) acc[r][p][h] = _mm256_fmadd_ps(t[r][p][h], am, acc[r][p][h]);
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int p = 0; p < P; ++p) {
      float* out = y + r * ldy + p * kNf4Panel;
      if (p == P - 1 && cols < kNf4Panel) {
        alignas(32) float tmp[16];
        _mm256_store_ps(tmp, acc[r][p][0]);
        _mm256_store_ps(tmp + 8, acc[r][p][1]);
        for (int c = 0; c < cols; ++c) out[c] = tmp[c];
      } else {
        _mm256_storeu_ps(out, acc[r][p][0]);
        _mm256_storeu_ps(out + 8, acc[r][p][1]);
      }
    }
  }
}

template <int R, int P>
LOOM_AVX2 void Rows(const float* x, int64_t k, const uint8_t* wq, const float* absmax,
                    int64_t block, int64_t j0, int64_t j1, float* y, int64_t ldy) {
  int64_t j = j0;
  for (; j + P * kNf4Panel <= j1; j += P * kNf4Panel) {
    Tile<R, P>(x, k, wq, absmax, block, j / kNf4Panel, kNf4Panel, y + (j - j0), ldy);
  }
  for (; j < j1; j += kNf4Panel) {
    const int cols = static_cast<int>(j1 - j < kNf4Panel ? j1 - j : kNf4Panel);
    Tile<R, 1>(x, k, wq, absmax, block, j / kNf4Panel, cols, y + (j - j0), ldy);
  }
}

}  // namespace

void MatmulNf4Avx2(const float* x, int64_t n, int64_t k, const uint8_t* wq, const float* absmax,
                   int64_t block, int64_t j0, int64_t j1, float* y, int64_t ldy) {
  // 4-row tiles: the code-table lookups (two vpermps and a blend per 8 weights) are shared by 4
  // rows instead of 2. Zen 2, 4864 × 896, block 64, 2 threads (loom_quant_bench BM_Nf4): 8 and
  // 128 rows 35-40 → 53-61 GFLOP/s; 6-row tiles measured 50-72 (128 rows) and 50-60 (8 rows).
  // One row stays ~20 GFLOP/s, bound by the lookups, not by the fma chains (two blocks' chains
  // interleaved measured the same).
  int64_t r = 0;
  for (; r + 4 <= n; r += 4) Rows<4, 1>(x + r * k, k, wq, absmax, block, j0, j1, y + r * ldy, ldy);
  for (; r + 2 <= n; r += 2) Rows<2, 1>(x + r * k, k, wq, absmax, block, j0, j1, y + r * ldy, ldy);
  for (; r < n; ++r) Rows<1, 2>(x + r * k, k, wq, absmax, block, j0, j1, y + r * ldy, ldy);
}

}  // namespace loom::cpu
