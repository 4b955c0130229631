// bitsandbytes 4-bit (NF4/FP4) matmul with AVX-512: 16 nibbles of a panel widened to lanes, vpermps through the 16-entry
// code table, f32 fma per block then one fma by the block's absmax.
#include <immintrin.h>

#include "cpu/nf4_cpu.h"

// GCC 12 reports the intrinsics' own _mm512_undefined_*() pass-through operands as maybe
// uninitialized; they are fully overwritten.
#if !defined(__clang__)  // a gcc-only warning
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#pragma GCC diagnostic ignored "-Wuninitialized"

#define LOOM_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma")))

namespace loom::cpu {

namespace {

// R activation rows × P panels from panel p0; `cols` valid columns in the tile's last panel
// (16 when full). Per (row, column) the arithmetic is MatmulNf4's contract (nf4_cpu.h): the
// same fma sequence as the scalar kernel, so the same bits, whatever R and P.
template <int R, int P>
LOOM_AVX512 inline void Tile(const float* x, int64_t k, const uint8_t* wq, const float* absmax,
                             int64_t block, const float* code, int64_t p0, int cols, float* y,
                             int64_t ldy) {
  const int64_t blocks = k / block, panel_bytes = kNf4Panel * k / 2;
  const __m512 lut = _mm512_loadu_ps(code);
  __m512 acc[R][P];
  for (int r = 0; r < R; ++r) {
    for (int p = 0; p < P; ++p) acc[r][p] = _mm512_setzero_ps();
  }
  for (int64_t b = 0; b < blocks; ++b) {
    __m512 t[R][P];
    for (int r = 0; r < R; ++r) {
      for (int p = 0; p < P; ++p) t[r][p] = _mm512_setzero_ps();
    }
    for (int64_t i = b * block; i < (b + 1) * block; i += 2) {
      __m512 w0[P], w1[P];
      for (int p = 0; p < P; ++p) {
        const uint8_t* at = wq + (p0 + p) * panel_bytes + (i / 2) * kNf4Panel;
        if ((i & 7) == 0)
          _mm_prefetch(reinterpret_cast<const char*>(at) + kNf4PrefetchAhead, _MM_HINT_T0);
        const __m512i v =
            _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(at)));
        w0[p] = _mm512_permutexvar_ps(v, lut);  // low nibble: vpermps reads bits 3..0
        w1[p] = _mm512_permutexvar_ps(_mm512_srli_epi32(v, 4), lut);
      }
      for (int r = 0; r < R; ++r) {
        const __m512 x0 = _mm512_set1_ps(x[r * k + i]);
        const __m512 x1 = _mm512_set1_ps(x[r * k + i + 1]);
        for (int p = 0; p < P; ++p) {
          t[r][p] = _mm512_fmadd_ps(w0[p], x0, t[r][p]);
          t[r][p] = _mm512_fmadd_ps(w1[p], x1, t[r][p]);
        }
      }
    }
    for (int p = 0; p < P; ++p) {
      const __m512 am = _mm512_loadu_ps(absmax + ((p0 + p) * blocks + b) * kNf4Panel);
      for (int r = 0; r < R; ++r) acc[r][p] = _mm512_fmadd_ps(t[r][p], am, acc[r][p]);
    }
  }
  const __mmask16 last = static_cast<__mmask16>((1u << cols) - 1u);
  for (int r = 0; r < R; ++r) {
    for (int p = 0; p < P; ++p) {
      float* out = y + r * ldy + p * kNf4Panel;
      if (p == P - 1 && cols < kNf4Panel) {
        _mm512_mask_storeu_ps(out, last, acc[r][p]);
      } else {
        _mm512_storeu_ps(out, acc[r][p]);
      }
    }
  }
}

// Rows [r0, r0 + R) over every panel of [j0, j1): P panels at a time, then one at a time.
template <int R, int P>
LOOM_AVX512 void Rows(const float* x, int64_t k, const uint8_t* wq, const float* absmax,
                      int64_t block, const float* code, int64_t j0, int64_t j1, float* y,
                      int64_t ldy) {
  int64_t j = j0;
  for (; j + P * kNf4Panel <= j1; j += P * kNf4Panel) {
    Tile<R, P>(x, k, wq, absmax, block, code, j / kNf4Panel, kNf4Panel, y + (j - j0), ldy);
  }
  for (; j < j1; j += kNf4Panel) {
    const int cols = static_cast<int>(j1 - j < kNf4Panel ? j1 - j : kNf4Panel);
    Tile<R, 1>(x, k, wq, absmax, block, code, j / kNf4Panel, cols, y + (j - j0), ldy);
  }
}

}  // namespace

void MatmulNf4Avx512(const float* x, int64_t n, int64_t k, const uint8_t* wq, const float* absmax,
                     int64_t block, const float* code, int64_t j0, int64_t j1, float* y,
                     int64_t ldy) {
  int64_t r = 0;
  if (n == 1) {  // decode: 4 panels for 4 independent fma chains
    Rows<1, 4>(x, k, wq, absmax, block, code, j0, j1, y, ldy);
    return;
  }
  // 8 rows share each panel's lookups (8 + 8 accumulators, 2 code vectors): half the vpermps
  // per product of two 4-row tiles.
  for (; r + 8 <= n; r += 8) Rows<8, 1>(x + r * k, k, wq, absmax, block, code, j0, j1, y + r * ldy, ldy);
  for (; r + 4 <= n; r += 4) Rows<4, 2>(x + r * k, k, wq, absmax, block, code, j0, j1, y + r * ldy, ldy);
  // 2 or 3 rows left (decode at batch 2-3): two rows share each lookup (2 x 4 panels: 8 chains,
  // 8 + 8 accumulators, 8 code vectors and the table in 32 registers).
  for (; r + 2 <= n; r += 2) Rows<2, 4>(x + r * k, k, wq, absmax, block, code, j0, j1, y + r * ldy, ldy);
  for (; r < n; ++r) Rows<1, 4>(x + r * k, k, wq, absmax, block, code, j0, j1, y + r * ldy, ldy);
}

}  // namespace loom::cpu
