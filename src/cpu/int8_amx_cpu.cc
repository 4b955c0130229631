// Int8 matmul with AMX-INT8 tiles (prefill): TDPBUSD of 16 u8-biased activation rows × 64 inputs by a 64-input block of a 16-column weight panel (the panel layout is the B-tile layout).
#include <cpuid.h>
#include <immintrin.h>

#include <algorithm>

#include "cpu/amx_tiles.h"
#include "cpu/int8_cpu.h"
#include "cpu/matmul_cpu.h"

// GCC 12 reports the intrinsics' own _mm512_undefined_*() pass-through operands as maybe
// uninitialized; they are fully overwritten.
#if !defined(__clang__)  // a gcc-only warning
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#pragma GCC diagnostic ignored "-Wuninitialized"

#define LOOM_AMX8 __attribute__((target("amx-tile,amx-int8,avx512f,avx512bw,avx512vl,avx512dq")))

namespace loom::cpu {

namespace {

constexpr int kRows = kAmxTileRows;  // rows of every tile, 64-byte rows
// Tiles 0-3: C [16 activation rows × 16 columns] int32; 4-5: A (activations); 6-7: B (weights).

// y rows r0.. (up to `rows` valid) for the 16 columns of panel p from C (16 × 16 int32): the
// VNNI kernel's epilogue, op for op, so both return the same bits.
LOOM_AMX8 inline void Epilogue(const int32_t* c, const float* sx, int rows, const float* sw,
                               const int32_t* wsum, int64_t j, int cols, float* y, int64_t ldy) {
  const __m512i corr = _mm512_slli_epi32(_mm512_loadu_si512(wsum + j), 7);  // 128·Σw
  const __m512 w_scale = _mm512_loadu_ps(sw + j);
  const auto mask = static_cast<__mmask16>(cols == 16 ? 0xFFFF : (1u << cols) - 1);
  for (int r = 0; r < rows; ++r) {
    const __m512i sum = _mm512_sub_epi32(_mm512_load_si512(c + r * 16), corr);
    const __m512 scale = _mm512_mul_ps(_mm512_set1_ps(sx[r]), w_scale);
    _mm512_mask_storeu_ps(y + r * ldy, mask, _mm512_mul_ps(_mm512_cvtepi32_ps(sum), scale));
  }
}

// Activation rows r0..r0+16·NA (NA tiles), panels p..p+NB−1.
template <int NA, int NB>
LOOM_AMX8 void Block(const uint8_t* xu, const float* sx, int valid_rows, int64_t kp, const int8_t* wq,
                     const float* sw, const int32_t* wsum, int64_t p, int64_t j0, int64_t j1, float* y,
                     int64_t ldy) {
  _tile_zero(0);
  if (NB > 1) _tile_zero(1);
  if (NA > 1) _tile_zero(2);
  if (NA > 1 && NB > 1) _tile_zero(3);
  const int64_t panel_bytes = kInt8Panel * kp;
  for (int64_t s = 0; s < kp / 64; ++s) {
    _tile_loadd(4, xu + s * 64, kp);
    if (NA > 1) _tile_loadd(5, xu + kRows * kp + s * 64, kp);
    _tile_loadd(6, wq + p * panel_bytes + s * 1024, 64);
    if (NB > 1) _tile_loadd(7, wq + (p + 1) * panel_bytes + s * 1024, 64);
    _tile_dpbusd(0, 4, 6);
    if (NB > 1) _tile_dpbusd(1, 4, 7);
    if (NA > 1) _tile_dpbusd(2, 5, 6);
    if (NA > 1 && NB > 1) _tile_dpbusd(3, 5, 7);
  }
  alignas(64) int32_t c[4][kRows * 16];
  _tile_stored(0, c[0], 64);
  if (NB > 1) _tile_stored(1, c[1], 64);
  if (NA > 1) _tile_stored(2, c[2], 64);
  if (NA > 1 && NB > 1) _tile_stored(3, c[3], 64);
  for (int a = 0; a < NA; ++a) {
    const int rows = std::min(kRows, valid_rows - a * kRows);
    if (rows <= 0) break;
    for (int b = 0; b < NB; ++b) {
      const int64_t j = (p + b) * kInt8Panel;
      const int cols = static_cast<int>(std::min<int64_t>(kInt8Panel, j1 - j));
      Epilogue(c[a * 2 + b], sx + a * kRows, rows, sw, wsum, j, cols, y + a * kRows * ldy + (j - j0), ldy);
    }
  }
}

}  // namespace

bool HasAmxInt8() {
#if defined(__x86_64__)
  static const bool ok = [] {
    unsigned int eax = 0, ebx = 0, ecx = 0, edx = 0;  // CPUID.(7,0):EDX bit 25 = AMX-INT8
    if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return false;
    return (edx & (1u << 25)) != 0 && AmxAvailable();  // AmxAvailable: tile state granted
  }();
  return ok;
#else
  return false;
#endif
}

LOOM_AMX8 void MatmulInt8Amx(const uint8_t* xu, const float* sx, int64_t n, int64_t k_pad,
                             const int8_t* wq, const float* sw, const int32_t* wsum, int64_t j0,
                             int64_t j1, float* y, int64_t ldy) {
  ConfigureAmxTiles();
  const int64_t first = j0 / kInt8Panel, last = (j1 + kInt8Panel - 1) / kInt8Panel;
  for (int64_t r = 0; r < n; r += 2 * kRows) {
    const int valid = static_cast<int>(std::min<int64_t>(2 * kRows, n - r));
    const uint8_t* x = xu + r * k_pad;
    float* yr = y + r * ldy;
    int64_t p = first;
    if (valid > kRows) {
      for (; p + 2 <= last; p += 2) Block<2, 2>(x, sx + r, valid, k_pad, wq, sw, wsum, p, j0, j1, yr, ldy);
      if (p < last) Block<2, 1>(x, sx + r, valid, k_pad, wq, sw, wsum, p, j0, j1, yr, ldy);
    } else {
      for (; p + 2 <= last; p += 2) Block<1, 2>(x, sx + r, valid, k_pad, wq, sw, wsum, p, j0, j1, yr, ldy);
      if (p < last) Block<1, 1>(x, sx + r, valid, k_pad, wq, sw, wsum, p, j0, j1, yr, ldy);
    }
  }
}

}  // namespace loom::cpu
