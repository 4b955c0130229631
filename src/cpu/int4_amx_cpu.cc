// Int4 matmul (symmetric and zero-point) with AMX-INT8 tiles (prefill): a panel's nibbles unpacked
// once per call into u8 B tiles, TDPBSUD of 16 s8 activation rows × 64 inputs, the VNNI kernel's
// epilogue per group.
#include <immintrin.h>

#include <algorithm>
#include <vector>

#include "cpu/amx_tiles.h"
#include "cpu/int4_cpu.h"

// GCC 12 reports the intrinsics' own _mm512_undefined_*() pass-through operands as maybe
// uninitialized; they are fully overwritten.
#if !defined(__clang__)  // a gcc-only warning
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#pragma GCC diagnostic ignored "-Wuninitialized"

#define LOOM_AMX4 \
  __attribute__((target("amx-tile,amx-int8,avx512f,avx512bw,avx512vl,avx512dq,f16c")))

namespace loom::cpu {

namespace {

constexpr int kRows = kAmxTileRows;   // rows of every tile, 64-byte rows
constexpr int64_t kTileBytes = 1024;  // one B tile: 64 inputs × 16 columns as u8
// Tiles 0-3: C [16 activation rows × 16 columns] int32; 4-5: A (activations); 6-7: B (weights).

// A panel's k_pad / 64 B tiles: tile s holds blocks 8s..8s+7, block b's low nibbles in row 2b
// (inputs 8t..8t+3 of each column: byte 4c + e) and its high nibbles in row 2b + 1 (inputs
// 8t+4..8t+7) — the panel layout is already the B-tile layout, a nibble apart.
LOOM_AMX4 void UnpackPanel(const uint8_t* panel, int64_t kp, uint8_t* tiles) {
  const __m512i nib = _mm512_set1_epi8(0x0F);
  for (int64_t t = 0; t < kp / 8; ++t) {
    const __m512i raw = _mm512_loadu_si512(panel + t * 64);
    _mm512_storeu_si512(tiles + t * 128, _mm512_and_si512(raw, nib));
    _mm512_storeu_si512(tiles + t * 128 + 64, _mm512_and_si512(_mm512_srli_epi16(raw, 4), nib));
  }
}

// Activation rows 0..16·NA (valid: how many are real) × panels p, p + 1 (NB of them), whose B
// tiles are tiles[b]. Per group g and (row, column): the exact int32 t = corr[r, g] + Σ u·x, then
// acc = fma(float(t), d[j, g], acc) in group order and y = acc · sx[r] — MatmulInt4's contract,
// the VNNI kernel's operations, so the same bits.
// With Z (zero points, MatmulInt4Zp's contract): corr holds the group sums Σx and the int32 is
// Σ u·x − z[j, g]·Σx, as the VNNI kernel's.
template <int G, int NA, int NB, bool Z>
LOOM_AMX4 void Block(const int8_t* xq, const float* sx, const int32_t* corr, int valid, int64_t kp,
                     const uint8_t* const* tiles, const uint16_t* wd, const uint8_t* wz, int64_t p,
                     int64_t j0, int64_t j1, float* y, int64_t ldy) {
  const int64_t groups = kp / G;
  constexpr int64_t kSteps = G / 64;
  alignas(64) float acc[NA * kRows][NB][16];
  for (int r = 0; r < NA * kRows; ++r) {
    for (int b = 0; b < NB; ++b) _mm512_store_ps(acc[r][b], _mm512_setzero_ps());
  }
  alignas(64) int32_t c[4][kRows * 16];
  for (int64_t g = 0; g < groups; ++g) {
    _tile_zero(0);
    if (NB > 1) _tile_zero(1);
    if (NA > 1) _tile_zero(2);
    if (NA > 1 && NB > 1) _tile_zero(3);
    for (int64_t s = g * kSteps; s < (g + 1) * kSteps; ++s) {
      _tile_loadd(4, xq + s * 64, kp);
      if (NA > 1) _tile_loadd(5, xq + kRows * kp + s * 64, kp);
      _tile_loadd(6, tiles[0] + s * kTileBytes, 64);
      if (NB > 1) _tile_loadd(7, tiles[1] + s * kTileBytes, 64);
      _tile_dpbsud(0, 4, 6);  // s8 activations × u8 weights (q + 8)
      if (NB > 1) _tile_dpbsud(1, 4, 7);
      if (NA > 1) _tile_dpbsud(2, 5, 6);
      if (NA > 1 && NB > 1) _tile_dpbsud(3, 5, 7);
    }
    _tile_stored(0, c[0], 64);
    if (NB > 1) _tile_stored(1, c[1], 64);
    if (NA > 1) _tile_stored(2, c[2], 64);
    if (NA > 1 && NB > 1) _tile_stored(3, c[3], 64);
    for (int b = 0; b < NB; ++b) {
      const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(
          reinterpret_cast<const __m256i*>(wd + ((p + b) * groups + g) * kInt4Panel)));
      __m512i z = _mm512_setzero_si512();
      if constexpr (Z) {
        z = _mm512_cvtepu8_epi32(_mm_loadu_si128(
            reinterpret_cast<const __m128i*>(wz + ((p + b) * groups + g) * kInt4Panel)));
      }
      for (int a = 0; a < NA; ++a) {
        const int rows = std::min(kRows, valid - a * kRows);
        for (int r = 0; r < rows; ++r) {
          const int row = a * kRows + r;
          const __m512i start =
              Z ? _mm512_mullo_epi32(z, _mm512_set1_epi32(-corr[row * groups + g]))
                : _mm512_set1_epi32(corr[row * groups + g]);
          const __m512i t = _mm512_add_epi32(start, _mm512_load_si512(c[a * 2 + b] + r * 16));
          _mm512_store_ps(acc[row][b],
                          _mm512_fmadd_ps(_mm512_cvtepi32_ps(t), d, _mm512_load_ps(acc[row][b])));
        }
      }
    }
  }
  for (int b = 0; b < NB; ++b) {
    const int64_t j = (p + b) * kInt4Panel;
    const int cols = static_cast<int>(std::min<int64_t>(kInt4Panel, j1 - j));
    const auto mask = static_cast<__mmask16>(cols == 16 ? 0xFFFF : (1u << cols) - 1);
    for (int row = 0; row < valid; ++row) {
      const __m512 v = _mm512_mul_ps(_mm512_load_ps(acc[row][b]), _mm512_set1_ps(sx[row]));
      _mm512_mask_storeu_ps(y + row * ldy + (j - j0), mask, v);
    }
  }
}

template <int G, bool Z>
LOOM_AMX4 void Run(const int8_t* xq, const float* sx, const int32_t* corr, int64_t n, int64_t kp,
                   const uint8_t* wq, const uint16_t* wd, const uint8_t* wz, int64_t j0, int64_t j1,
                   float* y, int64_t ldy) {
  ConfigureAmxTiles();
  const int64_t first = j0 / kInt4Panel, last = (j1 + kInt4Panel - 1) / kInt4Panel;
  const int64_t panel_bytes = kInt4Panel * kp / 2, tile_bytes = kInt4Panel * kp;  // per panel
  static thread_local std::vector<uint8_t> unpacked;  // this thread's 2 panels as B tiles
  unpacked.resize(static_cast<size_t>(2 * tile_bytes));
  const int64_t cs = kp / G;
  for (int64_t p = first; p < last; p += 2) {
    const bool two = p + 1 < last;
    const uint8_t* tiles[2] = {unpacked.data(), unpacked.data() + tile_bytes};
    UnpackPanel(wq + p * panel_bytes, kp, unpacked.data());
    if (two) UnpackPanel(wq + (p + 1) * panel_bytes, kp, unpacked.data() + tile_bytes);
    for (int64_t r = 0; r < n; r += 2 * kRows) {
      const int valid = static_cast<int>(std::min<int64_t>(2 * kRows, n - r));
      const int8_t* x = xq + r * kp;
      const int32_t* cr = corr + r * cs;
      float* yr = y + r * ldy;
      if (valid > kRows) {
        if (two)
          Block<G, 2, 2, Z>(x, sx + r, cr, valid, kp, tiles, wd, wz, p, j0, j1, yr, ldy);
        else
          Block<G, 2, 1, Z>(x, sx + r, cr, valid, kp, tiles, wd, wz, p, j0, j1, yr, ldy);
      } else {
        if (two)
          Block<G, 1, 2, Z>(x, sx + r, cr, valid, kp, tiles, wd, wz, p, j0, j1, yr, ldy);
        else
          Block<G, 1, 1, Z>(x, sx + r, cr, valid, kp, tiles, wd, wz, p, j0, j1, yr, ldy);
      }
    }
  }
}

}  // namespace

bool Int4AmxGroup(int group) { return group == 64 || group == 128; }

LOOM_AMX4 void MatmulInt4Amx(const int8_t* xq, const float* sx, const int32_t* corr, int64_t n,
                             int64_t k_pad, const uint8_t* wq, const uint16_t* wd, int group,
                             int64_t j0, int64_t j1, float* y, int64_t ldy) {
  using Fn = decltype(&Run<64, false>);
  if (Fn f = PickInt4Group(group, Fn{nullptr}, &Run<64, false>, &Run<128, false>)) {
    return f(xq, sx, corr, n, k_pad, wq, wd, nullptr, j0, j1, y, ldy);
  }
  MatmulInt4Scalar(xq, sx, corr, n, k_pad, wq, wd, group, j0, j1, y, ldy);
}

LOOM_AMX4 void MatmulInt4ZpAmx(const int8_t* xq, const float* sx, const int32_t* sums, int64_t n,
                               int64_t k_pad, const uint8_t* wq, const uint16_t* wd,
                               const uint8_t* wz, int group, int64_t j0, int64_t j1, float* y,
                               int64_t ldy) {
  using Fn = decltype(&Run<64, true>);
  if (Fn f = PickInt4Group(group, Fn{nullptr}, &Run<64, true>, &Run<128, true>)) {
    return f(xq, sx, sums, n, k_pad, wq, wd, wz, j0, j1, y, ldy);
  }
  MatmulInt4ZpScalar(xq, sx, sums, n, k_pad, wq, wd, wz, group, j0, j1, y, ldy);
}

}  // namespace loom::cpu
