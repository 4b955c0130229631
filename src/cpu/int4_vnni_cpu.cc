// Int4 matmul with AVX512_VNNI over 16-column panels: nibbles unpacked in registers, vpdpbusd (u8 weights × 4 broadcast s8 activations) per 16 columns.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "cpu/int4_cpu.h"
#include "cpu/side_prefetch.h"

// GCC 12 reports the intrinsics' own _mm512_undefined_*() pass-through operands as maybe
// uninitialized; they are fully overwritten.
#if !defined(__clang__)  // a gcc-only warning
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#pragma GCC diagnostic ignored "-Wuninitialized"

#define LOOM_VNNI __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512vnni,f16c")))

namespace loom::cpu {

namespace {

// acc += u8 w · s8 x (vpdpbusd) in place. GCC 12 does not tie the intrinsic's accumulator to its
// output in these register tiles: it copied every accumulator around each product (two
// vmovdqa per vpdpbusd) and spilled some to the stack inside the loop. 8 rows of 4864 × 896,
// hot (`BM_Quant/8/4864/896/128`, min of 4, 2 rounds): 109–114 → 97–99 µs; the 8-row lm_head
// 3.4–3.9 → 3.0 ms.
LOOM_VNNI inline __m512i Dpbusd(__m512i acc, __m512i w, __m512i x) {
  asm("vpdpbusd %[x], %[w], %[acc]" : [acc] "+v"(acc) : [w] "v"(w), [x] "v"(x));
  return acc;
}

LOOM_VNNI inline __m512i Broadcast4(const int8_t* x) {
  int32_t v;
  std::memcpy(&v, x, 4);
  return _mm512_set1_epi32(v);
}

// R activation rows × P panels (16 columns each) starting at panel p0; `cols` valid columns in
// the last panel. The arithmetic per (row, column) is MatmulInt4's contract (int4_cpu.h); with
// Z, MatmulInt4Zp's (corr holds the group sums, wz the zero points).
template <int R, int P, int G, bool Z>
LOOM_VNNI inline void Tile(const int8_t* xq, const float* sx, const int32_t* corr, int64_t kp,
                           const uint8_t* wq, const uint16_t* wd, const uint8_t* wz, int64_t p0,
                           int cols, float* y, int64_t ldy, SidePrefetch* side) {
  const int64_t groups = kp / G, panel_bytes = kInt4Panel * kp / 2;
  const __m512i nib = _mm512_set1_epi8(0x0F);
  __m512 acc[R][P];
  for (int r = 0; r < R; ++r) {
    for (int p = 0; p < P; ++p) acc[r][p] = _mm512_setzero_ps();
  }
  for (int64_t g = 0; g < groups; ++g) {
    __m512i lo[R][P], hi[R][P];
    if constexpr (Z) {  // −z·Σx per column: exact int32
      __m512i z[P];
      for (int p = 0; p < P; ++p) {
        z[p] = _mm512_cvtepu8_epi32(_mm_loadu_si128(
            reinterpret_cast<const __m128i*>(wz + ((p0 + p) * groups + g) * kInt4Panel)));
      }
      for (int r = 0; r < R; ++r) {
        const __m512i s = _mm512_set1_epi32(-corr[r * groups + g]);
        for (int p = 0; p < P; ++p) {
          lo[r][p] = _mm512_mullo_epi32(z[p], s);
          hi[r][p] = _mm512_setzero_si512();
        }
      }
    } else {
      for (int r = 0; r < R; ++r) {
        const __m512i c = _mm512_set1_epi32(corr[r * groups + g]);
        for (int p = 0; p < P; ++p) {
          lo[r][p] = c;
          hi[r][p] = _mm512_setzero_si512();
        }
      }
    }
    for (int64_t t = g * G / 8; t < (g + 1) * G / 8; ++t) {
      __m512i wl[P], wh[P];
      // every row count: see kInt4PrefetchAhead
      for (int p = 0; p < P; ++p) {
        _mm_prefetch(reinterpret_cast<const char*>(wq + (p0 + p) * panel_bytes + t * 64) +
                         kInt4PrefetchAhead,
                     _MM_HINT_T0);
      }
      if (side != nullptr) side->Next();
      for (int p = 0; p < P; ++p) {
        const __m512i raw = _mm512_loadu_si512(wq + (p0 + p) * panel_bytes + t * 64);
        wl[p] = _mm512_and_si512(raw, nib);
        wh[p] = _mm512_and_si512(_mm512_srli_epi16(raw, 4), nib);
      }
      for (int r = 0; r < R; ++r) {
        const __m512i xl = Broadcast4(xq + r * kp + 8 * t);
        const __m512i xh = Broadcast4(xq + r * kp + 8 * t + 4);
        for (int p = 0; p < P; ++p) {
          lo[r][p] = Dpbusd(lo[r][p], wl[p], xl);
          hi[r][p] = Dpbusd(hi[r][p], wh[p], xh);
        }
      }
    }
    for (int p = 0; p < P; ++p) {
      const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(
          reinterpret_cast<const __m256i*>(wd + ((p0 + p) * groups + g) * kInt4Panel)));
      for (int r = 0; r < R; ++r) {
        const __m512 t = _mm512_cvtepi32_ps(_mm512_add_epi32(lo[r][p], hi[r][p]));
        acc[r][p] = _mm512_fmadd_ps(t, d, acc[r][p]);
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    const __m512 s = _mm512_set1_ps(sx[r]);
    for (int p = 0; p < P; ++p) {
      const __m512 v = _mm512_mul_ps(acc[r][p], s);
      float* out = y + r * ldy + p * kInt4Panel;
      if (p == P - 1 && cols < kInt4Panel) {
        _mm512_mask_storeu_ps(out, static_cast<__mmask16>((1u << cols) - 1), v);
      } else {
        _mm512_storeu_ps(out, v);
      }
    }
  }
}

template <int R, int G, bool Z>
LOOM_VNNI void Rows(const int8_t* xq, const float* sx, const int32_t* corr, int64_t kp,
                    const uint8_t* wq, const uint16_t* wd, const uint8_t* wz, int64_t j0,
                    int64_t j1, float* y, int64_t ldy, SidePrefetch* side) {
  // One row: one panel at a time, so the weights are one sequential stream. Four panels a quarter
  // of the block apart (4 long streams; Emerald Rapids, 2026-12: 102-110 → 111-115 tok/s against
  // 4 adjacent panels) were slower on a Zen 4, whose prefetcher follows one stream best: 0.5B
  // shape, int4 g128 + head, 2 threads, 3 interleaved runs, batch 1 133-139 → 150-152 tok/s.
  constexpr int P = R == 1 ? 1 : R == 8 ? 1 : 2;
  const int64_t first = j0 / kInt4Panel, last = (j1 + kInt4Panel - 1) / kInt4Panel;
  int64_t p = first;
  for (; p + P < last || (p + P == last && j1 % kInt4Panel == 0); p += P) {
    Tile<R, P, G, Z>(xq, sx, corr, kp, wq, wd, wz, p, 16, y + (p - first) * kInt4Panel, ldy, side);
  }
  for (; p < last; ++p) {
    const int cols = static_cast<int>(std::min<int64_t>(kInt4Panel, j1 - p * kInt4Panel));
    Tile<R, 1, G, Z>(xq, sx, corr, kp, wq, wd, wz, p, cols, y + (p - first) * kInt4Panel, ldy,
                     side);
  }
}

// The rows in groups of 8, then 4, then what is left: each group streams the panels once
// (cpu::MatmulInt4 hands a block with several groups over in column chunks).
template <int G, bool Z>
LOOM_VNNI void AllRows(const int8_t* xq, const float* sx, const int32_t* corr, int64_t n,
                       int64_t kp, const uint8_t* wq, const uint16_t* wd, const uint8_t* wz,
                       int64_t j0, int64_t j1, float* y, int64_t ldy, SidePrefetch* side) {
  const int64_t cs = kp / G;
  int64_t r = 0;
  for (; r + 8 <= n; r += 8) {
    Rows<8, G, Z>(xq + r * kp, sx + r, corr + r * cs, kp, wq, wd, wz, j0, j1, y + r * ldy, ldy, side);
  }
  for (; r + 4 <= n; r += 4) {
    Rows<4, G, Z>(xq + r * kp, sx + r, corr + r * cs, kp, wq, wd, wz, j0, j1, y + r * ldy, ldy, side);
  }
  const int64_t left = n - r;
  const int8_t* x = xq + r * kp;
  const int32_t* cr = corr + r * cs;
  float* yr = y + r * ldy;
  if (left == 3) Rows<3, G, Z>(x, sx + r, cr, kp, wq, wd, wz, j0, j1, yr, ldy, side);
  if (left == 2) Rows<2, G, Z>(x, sx + r, cr, kp, wq, wd, wz, j0, j1, yr, ldy, side);
  if (left == 1) Rows<1, G, Z>(x, sx + r, cr, kp, wq, wd, wz, j0, j1, yr, ldy, side);
}

}  // namespace

LOOM_VNNI void MatmulInt4Vnni(const int8_t* xq, const float* sx, const int32_t* corr, int64_t n,
                              int64_t k_pad, const uint8_t* wq, const uint16_t* wd, int group,
                              int64_t j0, int64_t j1, float* y, int64_t ldy) {
  MatmulInt4VnniSide(xq, sx, corr, n, k_pad, wq, wd, group, j0, j1, y, ldy, nullptr);
}

LOOM_VNNI void MatmulInt4VnniSide(const int8_t* xq, const float* sx, const int32_t* corr,
                                  int64_t n, int64_t k_pad, const uint8_t* wq, const uint16_t* wd,
                                  int group, int64_t j0, int64_t j1, float* y, int64_t ldy,
                                  SidePrefetch* side) {
  if (auto* f = PickInt4Group(group, &AllRows<32, false>, &AllRows<64, false>, &AllRows<128, false>)) {
    return f(xq, sx, corr, n, k_pad, wq, wd, nullptr, j0, j1, y, ldy, side);
  }
  MatmulInt4Scalar(xq, sx, corr, n, k_pad, wq, wd, group, j0, j1, y, ldy);
}

LOOM_VNNI void MatmulInt4ZpVnni(const int8_t* xq, const float* sx, const int32_t* sums, int64_t n,
                                int64_t k_pad, const uint8_t* wq, const uint16_t* wd,
                                const uint8_t* wz, int group, int64_t j0, int64_t j1, float* y,
                                int64_t ldy) {
  if (auto* f = PickInt4Group(group, &AllRows<32, true>, &AllRows<64, true>, &AllRows<128, true>)) {
    return f(xq, sx, sums, n, k_pad, wq, wd, wz, j0, j1, y, ldy, nullptr);
  }
  MatmulInt4ZpScalar(xq, sx, sums, n, k_pad, wq, wd, wz, group, j0, j1, y, ldy);
}

}  // namespace loom::cpu
