// Int4 matmul with AVX2 (no VNNI) over 16-column panels, symmetric and with zero points (GPTQ/AWQ): nibbles unpacked in registers, vpmaddubsw (the stored u8 nibble × s8 activations) summed in int16 over 4 blocks, then vpmaddwd per ymm half (8 columns).
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "cpu/avx2_broadcast.h"
#include "cpu/int4_cpu.h"

#define LOOM_AVX2 __attribute__((target("avx2,fma,f16c")))

namespace loom::cpu {

namespace {

LOOM_AVX2 inline void Store(float* out, __m256 lo, __m256 hi, int cols) {
  if (cols == kInt4Panel) {
    _mm256_storeu_ps(out, lo);
    _mm256_storeu_ps(out + 8, hi);
    return;
  }
  alignas(32) float tmp[kInt4Panel];
  _mm256_store_ps(tmp, lo);
  _mm256_store_ps(tmp + 8, hi);
  std::memcpy(out, tmp, sizeof(float) * static_cast<size_t>(cols));
}

// R activation rows × P panels (16 columns each, two ymm halves): panels p0 + p·ps, output columns
// at (p·ps)·16; `cols` valid columns in the last panel. Per lane (one column, 4 inputs) and block:
// vpmaddubsw gives int16 pairs (q + 8)·x ≤ 2·15·128 = 3840 in magnitude, the low and high nibbles'
// pairs summed ≤ 7680; kU = 4 blocks of those summed in int16 stay ≤ 30720 < 2¹⁵, then one vpmaddwd
// per kU blocks into int32: the exact sum. Zen 2 issues vpmaddubsw and vpmaddwd on one pipe, so
// this is 2.25 multiply uops per 32 weight bytes instead of 3. The arithmetic per (row, column) is
// MatmulInt4's contract (int4_cpu.h): exact integers, whatever the order; with Z, MatmulInt4Zp's
// (corr holds the group sums Σx, wz the zero points, and each sum starts at −z·Σx per column).
constexpr int kU = 4;

// s16 += vpmaddubsw(wl, xl) + vpmaddubsw(wh, xh), the add in the accumulator's own register.
LOOM_AVX2 inline void Acc16(__m256i& s16, __m256i wl, __m256i wh, __m256i xl, __m256i xh) {
  const __m256i pairs = _mm256_add_epi16(_mm256_maddubs_epi16(wl, xl), _mm256_maddubs_epi16(wh, xh));
  asm("vpaddw %[v], %[acc], %[acc]" : [acc] "+x"(s16) : [v] "x"(pairs));
}

// The 3-row, one-panel run of kU blocks from t0 (prefill's tile) with its 6 int16 sums in named
// registers: as an array GCC 12 kept 2 of them on the stack, a load and a store per block on
// their dependency chains. Adds the run's int32 sums into sum[r][h].
LOOM_AVX2 inline void Run3(const int8_t* xq, int64_t kp, const uint8_t* panel, int64_t t0,
                           __m256i sum[3][1][2]) {
  const __m256i nib = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1);
  __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0;  // rows 0–2, columns 0–7
  __m256i b0 = a0, b1 = a0, b2 = a0;                      // rows 0–2, columns 8–15
#pragma GCC unroll 1
  for (int64_t t = t0; t < t0 + kU; ++t) {
    _mm_prefetch(reinterpret_cast<const char*>(panel + t * 64) + kInt4PrefetchAhead, _MM_HINT_T0);
    const __m256i l0 = Broadcast4(xq + 8 * t), h0 = Broadcast4(xq + 8 * t + 4);
    const __m256i l1 = Broadcast4(xq + kp + 8 * t), h1 = Broadcast4(xq + kp + 8 * t + 4);
    const __m256i l2 = Broadcast4(xq + 2 * kp + 8 * t), h2 = Broadcast4(xq + 2 * kp + 8 * t + 4);
    const __m256i raw0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(panel + t * 64));
    const __m256i wl0 = _mm256_and_si256(raw0, nib);
    const __m256i wh0 = _mm256_and_si256(_mm256_srli_epi16(raw0, 4), nib);
    Acc16(a0, wl0, wh0, l0, h0);
    Acc16(a1, wl0, wh0, l1, h1);
    Acc16(a2, wl0, wh0, l2, h2);
    const __m256i raw1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(panel + t * 64 + 32));
    const __m256i wl1 = _mm256_and_si256(raw1, nib);
    const __m256i wh1 = _mm256_and_si256(_mm256_srli_epi16(raw1, 4), nib);
    Acc16(b0, wl1, wh1, l0, h0);
    Acc16(b1, wl1, wh1, l1, h1);
    Acc16(b2, wl1, wh1, l2, h2);
  }
  const __m256i lo[3] = {a0, a1, a2}, hi[3] = {b0, b1, b2};
  for (int r = 0; r < 3; ++r) {
    sum[r][0][0] = _mm256_add_epi32(sum[r][0][0], _mm256_madd_epi16(lo[r], ones));
    sum[r][0][1] = _mm256_add_epi32(sum[r][0][1], _mm256_madd_epi16(hi[r], ones));
  }
}

template <int R, int P, int G, bool Z>
LOOM_AVX2 inline void Tile(const int8_t* xq, const float* sx, const int32_t* corr, int64_t kp,
                           const uint8_t* wq, const uint16_t* wd, const uint8_t* wz, int64_t p0,
                           int64_t ps, int cols, float* y, int64_t ldy, SidePrefetch* side) {
  static_assert(G % (8 * kU) == 0, "a group is whole kU-block runs");
  const int64_t groups = kp / G, panel_bytes = kInt4Panel * kp / 2;
  const __m256i nib = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1);
  __m256 acc[R][P][2];
  for (int r = 0; r < R; ++r) {
    for (int p = 0; p < P; ++p) acc[r][p][0] = acc[r][p][1] = _mm256_setzero_ps();
  }
  for (int64_t g = 0; g < groups; ++g) {
    __m256i sum[R][P][2];
    if constexpr (Z) {  // −z·Σx per column: |z·Σx| ≤ 16·128·128, exact in int32
      __m256i z[P][2];
      for (int p = 0; p < P; ++p) {
        for (int h = 0; h < 2; ++h) {
          z[p][h] = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(
              wz + ((p0 + p * ps) * groups + g) * kInt4Panel + 8 * h)));
        }
      }
      for (int r = 0; r < R; ++r) {
        const __m256i s = _mm256_set1_epi32(-corr[r * groups + g]);
        for (int p = 0; p < P; ++p) {
          for (int h = 0; h < 2; ++h) sum[r][p][h] = _mm256_mullo_epi32(z[p][h], s);
        }
      }
    } else {
      for (int r = 0; r < R; ++r) {
        const __m256i c = _mm256_set1_epi32(corr[r * groups + g]);
        for (int p = 0; p < P; ++p) sum[r][p][0] = sum[r][p][1] = c;
      }
    }
    for (int64_t t0 = g * G / 8; t0 < (g + 1) * G / 8; t0 += kU) {
      if constexpr (R == 3 && P == 1) {
        if (side != nullptr) side->Next();
        Run3(xq, kp, wq + p0 * panel_bytes, t0, sum);
        continue;
      }
      __m256i s16[R][P][2];
      for (int r = 0; r < R; ++r) {
        for (int p = 0; p < P; ++p) s16[r][p][0] = s16[r][p][1] = _mm256_setzero_si256();
      }
      // Not unrolled: unrolled, GCC hoisted the 4 blocks' loads and broadcasts and spilled
      // (3-row tile: 135 stack references, 66 rolled); rolled, 4864 × 896 went 190-204 → 213-221
      // GFLOP/s at 1 row and 254 → 242-279 at 128 (g128), 1 row g32 182-192 → 216-220, zero
      // points 165-205 → 220-229 (loom_quant_bench, 2 threads, Zen 2, 3 interleaved runs).
#pragma GCC unroll 1
      for (int u = 0; u < kU; ++u) {
        const int64_t t = t0 + u;
        // every row count: see kInt4PrefetchAhead
        for (int p = 0; p < P; ++p) {
          _mm_prefetch(reinterpret_cast<const char*>(wq + (p0 + p * ps) * panel_bytes + t * 64) +
                           kInt4PrefetchAhead,
                       _MM_HINT_T0);
        }
        if (side != nullptr) side->Next();
        __m256i xl[R], xh[R];
        for (int r = 0; r < R; ++r) {
          xl[r] = Broadcast4(xq + r * kp + 8 * t);
          xh[r] = Broadcast4(xq + r * kp + 8 * t + 4);
        }
        for (int p = 0; p < P; ++p) {
          for (int h = 0; h < 2; ++h) {
            const __m256i raw = _mm256_loadu_si256(
                reinterpret_cast<const __m256i*>(wq + (p0 + p * ps) * panel_bytes + t * 64 + 32 * h));
            const __m256i wl = _mm256_and_si256(raw, nib);
            const __m256i wh = _mm256_and_si256(_mm256_srli_epi16(raw, 4), nib);
            for (int r = 0; r < R; ++r) {
              const __m256i pairs = _mm256_add_epi16(_mm256_maddubs_epi16(wl, xl[r]),
                                                     _mm256_maddubs_epi16(wh, xh[r]));
              s16[r][p][h] = _mm256_add_epi16(s16[r][p][h], pairs);
            }
          }
        }
      }
      for (int r = 0; r < R; ++r) {
        for (int p = 0; p < P; ++p) {
          for (int h = 0; h < 2; ++h) {
            sum[r][p][h] = _mm256_add_epi32(sum[r][p][h], _mm256_madd_epi16(s16[r][p][h], ones));
          }
        }
      }
    }
    for (int p = 0; p < P; ++p) {
      for (int h = 0; h < 2; ++h) {
        const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(
            wd + ((p0 + p * ps) * groups + g) * kInt4Panel + 8 * h)));
        for (int r = 0; r < R; ++r) {
          acc[r][p][h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum[r][p][h]), d, acc[r][p][h]);
        }
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    const __m256 s = _mm256_set1_ps(sx[r]);
    for (int p = 0; p < P; ++p) {
      Store(y + r * ldy + p * ps * kInt4Panel, _mm256_mul_ps(acc[r][p][0], s),
            _mm256_mul_ps(acc[r][p][1], s), p == P - 1 ? cols : kInt4Panel);
    }
  }
}

template <int R, int G, bool Z>
LOOM_AVX2 void Rows(const int8_t* xq, const float* sx, const int32_t* corr, int64_t kp,
                    const uint8_t* wq, const uint16_t* wd, const uint8_t* wz, int64_t j0,
                    int64_t j1, float* y, int64_t ldy, SidePrefetch* side) {
  constexpr int P = R == 1 ? 2 : 1;  // int32 and f32 accumulators: at most 12 of 16 ymm
  const int64_t first = j0 / kInt4Panel, last = (j1 + kInt4Panel - 1) / kInt4Panel;
  int64_t p = first;
  if constexpr (P == 2) {
    // The two panels of a tile are i and h + i of the block's full panels, not neighbours: two
    // sequential streams instead of one stream jumping 2 panels every tile. One row, 151936 ×
    // 896 g128 (the lm_head, from DRAM), 2 threads: 18.7 → 21-23 GB/s (loom_quant_bench).
    const int64_t h = (j1 / kInt4Panel - first) / 2;
    for (int64_t i = 0; i < h; ++i) {
      Tile<R, 2, G, Z>(xq, sx, corr, kp, wq, wd, wz, first + i, h, kInt4Panel,
                       y + i * kInt4Panel, ldy, side);
    }
    p += 2 * h;
  }
  for (; p < last; ++p) {
    const int cols = static_cast<int>(std::min<int64_t>(kInt4Panel, j1 - p * kInt4Panel));
    Tile<R, 1, G, Z>(xq, sx, corr, kp, wq, wd, wz, p, 1, cols, y + (p - first) * kInt4Panel, ldy, side);
  }
}

template <int G, bool Z>
LOOM_AVX2 void AllRows(const int8_t* xq, const float* sx, const int32_t* corr, int64_t n,
                       int64_t kp, const uint8_t* wq, const uint16_t* wd, const uint8_t* wz,
                       int64_t j0, int64_t j1, float* y, int64_t ldy, SidePrefetch* side) {
  const int64_t cs = kp / G;
  int64_t r = 0;
  for (; r + 3 <= n; r += 3) {
    Rows<3, G, Z>(xq + r * kp, sx + r, corr + r * cs, kp, wq, wd, wz, j0, j1, y + r * ldy, ldy, side);
  }
  const int64_t left = n - r;
  const int8_t* x = xq + r * kp;
  const int32_t* cr = corr + r * cs;
  float* yr = y + r * ldy;
  if (left == 2) Rows<2, G, Z>(x, sx + r, cr, kp, wq, wd, wz, j0, j1, yr, ldy, side);
  if (left == 1) Rows<1, G, Z>(x, sx + r, cr, kp, wq, wd, wz, j0, j1, yr, ldy, side);
}

}  // namespace

LOOM_AVX2 void MatmulInt4Avx2(const int8_t* xq, const float* sx, const int32_t* corr, int64_t n,
                              int64_t k_pad, const uint8_t* wq, const uint16_t* wd, int group,
                              int64_t j0, int64_t j1, float* y, int64_t ldy) {
  MatmulInt4Avx2Side(xq, sx, corr, n, k_pad, wq, wd, group, j0, j1, y, ldy, nullptr);
}

LOOM_AVX2 void MatmulInt4Avx2Side(const int8_t* xq, const float* sx, const int32_t* corr,
                                  int64_t n, int64_t k_pad, const uint8_t* wq, const uint16_t* wd,
                                  int group, int64_t j0, int64_t j1, float* y, int64_t ldy,
                                  SidePrefetch* side) {
  // The side lines at several rows only, where the kernel is compute-bound (batch 8: a step's
  // int4 weights stream at well under the memory's rate). One row streams the block at that
  // rate, and its block (1.1 MB of a 4864-wide projection) is larger than a Zen 3 L2: lines
  // issued during it are evicted before the epilogue reads them.
  if (n == 1) side = nullptr;
  if (auto* f = PickInt4Group(group, &AllRows<32, false>, &AllRows<64, false>, &AllRows<128, false>)) {
    return f(xq, sx, corr, n, k_pad, wq, wd, nullptr, j0, j1, y, ldy, side);
  }
  MatmulInt4Scalar(xq, sx, corr, n, k_pad, wq, wd, group, j0, j1, y, ldy);
}

LOOM_AVX2 void MatmulInt4ZpAvx2(const int8_t* xq, const float* sx, const int32_t* sums, int64_t n,
                                int64_t k_pad, const uint8_t* wq, const uint16_t* wd,
                                const uint8_t* wz, int group, int64_t j0, int64_t j1, float* y,
                                int64_t ldy) {
  if (auto* f = PickInt4Group(group, &AllRows<32, true>, &AllRows<64, true>, &AllRows<128, true>)) {
    return f(xq, sx, sums, n, k_pad, wq, wd, wz, j0, j1, y, ldy, nullptr);
  }
  MatmulInt4ZpScalar(xq, sx, sums, n, k_pad, wq, wd, wz, group, j0, j1, y, ldy);
}

}  // namespace loom::cpu
