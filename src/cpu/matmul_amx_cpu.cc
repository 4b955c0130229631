// AMX-BF16 matmul for bf16 weights (Intel Sapphire/Emerald Rapids): one TDPBF16PS multiplies a
// 16×32 weight tile by a 32×16 activation tile (8192 MACs), ~16× the AVX-512 FMA rate. Weights
// are read in place (row-major [m, k] is already the A-tile layout); activations are packed
// once per matmul into B tiles by PackActivationsAmx.
// GCC 12 warns falsely inside its own AVX-512 headers (_mm512_undefined_* pass-through operands).
#pragma GCC diagnostic ignored "-Wuninitialized"
#if !defined(__clang__)  // a gcc-only warning
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "cpu/amx_tiles.h"
#include "cpu/matmul_cpu.h"
#include "cpu/silu_avx512.h"

#define LOOM_AMX __attribute__((target("amx-tile,amx-bf16,avx512f,avx512bw,avx512vl,avx512dq,avx512bf16")))

namespace loom::cpu {

namespace {

constexpr int kTile = kAmxTileRows;  // rows of every tile; 64-byte rows (32 bf16 or 16 f32)
// Tiles 0-3: C accumulators [16 weight rows × 16 activation rows] f32; 4-5: A (weights);
// 6-7: B (activations).

// Weight rows j..j+31 (or j..j+15 when NA == 1) × activation groups g, g+1 (NB of them).
// No software prefetch: asking for the next block's 32 rows one 64-byte column per step (into
// L2) made decode slower on Emerald Rapids (bf16 0.5B shape, batch-invariant, 3 interleaved
// runs: batch 1 22.3-23.0 → 24.9-25.3 tok/s, batch 8 165-167 → 178-180 without it; prefill
// pp128 unchanged); the hardware prefetchers follow these row streams by themselves.
// PACKED: weights in PackWeightAmx's panels (each tile one contiguous KiB), else row-major;
// packed weight tiles are loaded with the non-temporal hint (TILELOADDT1): the 32-client closed
// loop (bf16 0.5B shape, Emerald Rapids) 325-343 → 342-348 tok/s over 5 interleaved rounds,
// decode and pp128 prefill unchanged.
// w5 (packed only): tile 5's panel when it is not the panel after w (the gate/up kernel's up).
template <int NA, int NB, bool SPLIT, bool PACKED = false>
LOOM_AMX void Block(const uint16_t* w, int64_t w_stride_bytes, const uint16_t* xp,
                    int64_t lo_offset, int64_t group_stride, int64_t steps, float* c_out,
                    const uint16_t* w5 = nullptr) {
  if (PACKED && w5 == nullptr) w5 = w + steps * 512;
  _tile_zero(0);
  if (NB > 1) _tile_zero(1);
  if (NA > 1) _tile_zero(2);
  if (NA > 1 && NB > 1) _tile_zero(3);
  for (int64_t s = 0; s < steps; ++s) {
    if constexpr (PACKED) {  // PackWeightAmx's layout: w is a panel, the next panel after it
      _tile_stream_loadd(4, w + s * 512, 64);
      if (NA > 1) _tile_stream_loadd(5, w5 + s * 512, 64);
    } else {
      _tile_loadd(4, w + s * 32, w_stride_bytes);
      if (NA > 1)
        _tile_loadd(5, reinterpret_cast<const uint8_t*>(w + s * 32) + kTile * w_stride_bytes,
                    w_stride_bytes);
    }
    const uint16_t* b0 = xp + s * 512;
    _tile_loadd(6, b0, 64);
    if (NB > 1) _tile_loadd(7, b0 + group_stride, 64);
    _tile_dpbf16ps(0, 4, 6);
    if (NB > 1) _tile_dpbf16ps(1, 4, 7);
    if (NA > 1) _tile_dpbf16ps(2, 5, 6);
    if (NA > 1 && NB > 1) _tile_dpbf16ps(3, 5, 7);
    if constexpr (SPLIT) {
      _tile_loadd(6, b0 + lo_offset, 64);
      if (NB > 1) _tile_loadd(7, b0 + lo_offset + group_stride, 64);
      _tile_dpbf16ps(0, 4, 6);
      if (NB > 1) _tile_dpbf16ps(1, 4, 7);
      if (NA > 1) _tile_dpbf16ps(2, 5, 6);
      if (NA > 1 && NB > 1) _tile_dpbf16ps(3, 5, 7);
    }
  }
  _tile_stored(0, c_out, 64);
  if (NB > 1) _tile_stored(1, c_out + 256, 64);
  if (NA > 1) _tile_stored(2, c_out + 512, 64);
  if (NA > 1 && NB > 1) _tile_stored(3, c_out + 768, 64);
}

// r[16] rows of a 16×16 f32 block → its transpose, in place (64 shuffles).
LOOM_AMX inline void Transpose16(__m512 (&r)[16]) {
  __m512 t[16], u[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int q = 0; q < 4; ++q) {  // rows 4q..4q+3 → u[4q + j] holds column 4L+j of them
    const __m512d a = _mm512_castps_pd(t[4 * q]), b = _mm512_castps_pd(t[4 * q + 2]);
    const __m512d c = _mm512_castps_pd(t[4 * q + 1]), d = _mm512_castps_pd(t[4 * q + 3]);
    u[4 * q + 0] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, b));
    u[4 * q + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, b));
    u[4 * q + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(c, d));
    u[4 * q + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(c, d));
  }
  for (int j = 0; j < 4; ++j) {
    const __m512 s0 = _mm512_shuffle_f32x4(u[j], u[4 + j], 0x44);
    const __m512 s1 = _mm512_shuffle_f32x4(u[j], u[4 + j], 0xEE);
    const __m512 s2 = _mm512_shuffle_f32x4(u[8 + j], u[12 + j], 0x44);
    const __m512 s3 = _mm512_shuffle_f32x4(u[8 + j], u[12 + j], 0xEE);
    r[0 + j] = _mm512_shuffle_f32x4(s0, s2, 0x88);
    r[4 + j] = _mm512_shuffle_f32x4(s0, s2, 0xDD);
    r[8 + j] = _mm512_shuffle_f32x4(s1, s3, 0x88);
    r[12 + j] = _mm512_shuffle_f32x4(s1, s3, 0xDD);
  }
}

// `rows` (< 16) weight rows of k inputs copied into a zero-padded 16-row panel (this thread's),
// so a tile load of 16 rows never reads past the weights.
inline const uint16_t* ZeroPaddedPanel(const uint16_t* w, int64_t rows, int64_t k) {
  static thread_local std::vector<uint16_t> panel;
  panel.assign(static_cast<size_t>(kTile * k), 0);
  std::memcpy(panel.data(), w, static_cast<size_t>(rows * k) * 2);
  return panel.data();
}

// Weight rows in chunks of about kChunkBytes, each chunk against every activation pair before
// the next, so the chunk stays in L2 while the pairs pass over it and a pair stays in L2 across
// the chunk's blocks; one 32-row block at a time would read all the activations once per block
// (from L3 once they outgrow L2: a 1024-row prefill's 10 MB for down_proj). Packed weights
// whose activations fit in kChunkBytes keep that block-major order (chunks of one block):
// there it measured faster (`BM_Matmul` packed, 96 × (4864 × 896), 2 threads, Emerald Rapids
// AMX-BF16: 1.74 TFLOP/s block-major, 1.52 in one chunk). Every output is still one Block's sum
// over all k, so the bits do not depend on the order.
constexpr int64_t kChunkBytes = int64_t{1} << 20;

// Weight rows per chunk: `unit` (one block: chunks of one block are the block-major order) when
// packed weights meet activations that fit in kChunkBytes, else about kChunkBytes of weights,
// `row_bytes` a weight row (a gate and an up row together for the gate/up kernel).
inline int64_t ChunkRows(bool packed, int64_t groups, int64_t k, int64_t unit, int64_t row_bytes) {
  if (packed && groups * kTile * k * 2 <= kChunkBytes) return unit;
  return std::max<int64_t>(unit, kChunkBytes / row_bytes / unit * unit);
}

template <bool SPLIT, bool PACKED = false>
LOOM_AMX void Kernel(const uint16_t* xp, int64_t lo_offset, int64_t n, int64_t k, const uint16_t* w,
                     int64_t j0, int64_t j1, float* y, int64_t ldy) {
  ConfigureAmxTiles();
  const int64_t steps = k / 32;
  const int64_t groups = (n + kTile - 1) / kTile;
  const int64_t group_stride = steps * 512;  // uint16 per 16-row activation group
  const int64_t chunk_rows = ChunkRows(PACKED, groups, k, 2 * kTile, k * 2);
  alignas(64) float c[4][kTile * kTile];      // [tile][weight row][activation row]
  for (int64_t jc = j0; jc < j1; jc += chunk_rows) {
    const int64_t jc_end = std::min(j1, jc + chunk_rows);
    for (int64_t g = 0; g < groups; g += 2) {
      const int nb = g + 1 < groups ? 2 : 1;
      const uint16_t* xg = xp + g * group_stride;
      for (int64_t j = jc; j < jc_end;) {
        const int64_t rows_left = jc_end - j;
        const uint16_t* wj = PACKED ? w + (j / kTile) * steps * 512 : w + j * k;
        int64_t w_stride = k * 2;
        int na = rows_left >= 32 ? 2 : 1;
        int64_t valid_rows = std::min<int64_t>(rows_left, na * kTile);
        if (!PACKED && rows_left < kTile) wj = ZeroPaddedPanel(wj, rows_left, k);  // tail rows
        if (na == 2 && nb == 2)
          Block<2, 2, SPLIT, PACKED>(wj, w_stride, xg, lo_offset, group_stride, steps, c[0]);
        if (na == 2 && nb == 1)
          Block<2, 1, SPLIT, PACKED>(wj, w_stride, xg, lo_offset, group_stride, steps, c[0]);
        if (na == 1 && nb == 2)
          Block<1, 2, SPLIT, PACKED>(wj, w_stride, xg, lo_offset, group_stride, steps, c[0]);
        if (na == 1 && nb == 1)
          Block<1, 1, SPLIT, PACKED>(wj, w_stride, xg, lo_offset, group_stride, steps, c[0]);
        // c tile (a, b) holds y[g+b rows][j + 16a ..]: transpose while writing out.
        for (int a = 0; a < na; ++a) {
          for (int b = 0; b < nb; ++b) {
            const float* ct = c[a * 2 + b];
            const int64_t x_base = (g + b) * kTile;
            const int64_t xr_end = std::min<int64_t>(kTile, n - x_base);
            const int64_t jr_end = std::min<int64_t>(kTile, valid_rows - a * kTile);
            __m512 rows[16];
            for (int i = 0; i < 16; ++i) rows[i] = _mm512_load_ps(ct + i * kTile);
            Transpose16(rows);
            const __mmask16 keep = static_cast<__mmask16>((1u << jr_end) - 1);
            for (int64_t xr = 0; xr < xr_end; ++xr) {
              _mm512_mask_storeu_ps(y + (x_base + xr) * ldy + j + a * kTile, keep, rows[xr]);
            }
          }
        }
        j += valid_rows;
      }
    }
  }
}

// MatmulBf16AmxPackedSiluMul: 16 gate rows (tile 4) and the same 16 up rows (tile 5) per block,
// in Kernel's order (block-major, or chunks once the activations outgrow kChunkBytes).
template <bool SPLIT>
LOOM_AMX void SiluMulKernel(const uint16_t* xp, int64_t lo_offset, int64_t n, int64_t k,
                            const uint16_t* wg, const uint16_t* wu, int64_t j0, int64_t j1,
                            float* y, int64_t ldy) {
  ConfigureAmxTiles();
  const int64_t steps = k / 32;
  const int64_t groups = (n + kTile - 1) / kTile;
  const int64_t group_stride = steps * 512;
  const int64_t chunk_rows = ChunkRows(true, groups, k, kTile, k * 4);
  alignas(64) float c[4][kTile * kTile];  // gate × g, gate × g+1, up × g, up × g+1
  for (int64_t jc = j0; jc < j1; jc += chunk_rows) {
    const int64_t jc_end = std::min(j1, jc + chunk_rows);
    for (int64_t g = 0; g < groups; g += 2) {
      const int nb = g + 1 < groups ? 2 : 1;
      const uint16_t* xg = xp + g * group_stride;
      for (int64_t j = jc; j < jc_end; j += kTile) {
        const uint16_t* pg = wg + (j / kTile) * steps * 512;
        const uint16_t* pu = wu + (j / kTile) * steps * 512;
        if (nb == 2) {
          Block<2, 2, SPLIT, true>(pg, 0, xg, lo_offset, group_stride, steps, c[0], pu);
        } else {
          Block<2, 1, SPLIT, true>(pg, 0, xg, lo_offset, group_stride, steps, c[0], pu);
        }
        // Block's tiles: 0 gate × g, 1 gate × g+1, 2 up × g, 3 up × g+1 (c[1] unused when nb 1:
        // Block<2, 1> stores up × g at c[0] + 512, i.e. c[2]).
        for (int b = 0; b < nb; ++b) {
          __m512 gr[16], ur[16];
          for (int i = 0; i < 16; ++i) {
            gr[i] = _mm512_load_ps(c[b] + i * kTile);
            ur[i] = _mm512_load_ps(c[2 + b] + i * kTile);
          }
          Transpose16(gr);
          Transpose16(ur);
          const int64_t x_base = (g + b) * kTile;
          const int64_t xr_end = std::min<int64_t>(kTile, n - x_base);
          for (int64_t xr = 0; xr < xr_end; ++xr) {
            _mm512_storeu_ps(y + (x_base + xr) * ldy + j, SiluMul16(gr[xr], ur[xr]));
          }
        }
      }
    }
  }
}

}  // namespace

bool AmxAvailable() {
#if defined(__x86_64__)
  static const bool ok = [] {
    // CPUID.(7,0):EDX bit 22 = AMX-BF16, bit 24 = AMX-TILE (read directly: clang 14's
    // __builtin_cpu_supports does not know the AMX names).
    unsigned int eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return false;
    if (!(edx & (1u << 22)) || !(edx & (1u << 24))) return false;
    // Linux hands out the 8 KiB tile state only on request (ARCH_REQ_XCOMP_PERM, XTILEDATA).
    return syscall(SYS_arch_prctl, 0x1023, 18) == 0;
  }();
  return ok;
#else
  return false;
#endif
}

size_t PackedActivationsAmxSize(int64_t n, int64_t k, bool split) {
  const int64_t groups = (n + kTile - 1) / kTile;
  return static_cast<size_t>(groups * kTile * k) * (split ? 2 : 1);
}

// Converts 32 floats to bf16 (round to nearest even) as 16 dwords of (even, odd) pairs, in a
// register; `lo` (nullable) gets the residuals x − bf16(x) likewise.
LOOM_AMX inline __m512i ConvertPairs(const float* src, __m512i* lo) {
  const __m512 a = _mm512_loadu_ps(src);
  const __m512 b = _mm512_loadu_ps(src + 16);
  const __m512i h = (__m512i)_mm512_cvtne2ps_pbh(b, a);  // [a0..a15, b0..b15]
  if (lo) {
    const __m512 ha = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_castsi512_si256(h)), 16));
    const __m512 hb = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(h, 1)), 16));
    *lo = (__m512i)_mm512_cvtne2ps_pbh(_mm512_sub_ps(b, hb), _mm512_sub_ps(a, ha));
  }
  return h;
}

// The same, stored to hi (and lo).
LOOM_AMX inline void ConvertPairs(const float* src, uint32_t* hi, uint32_t* lo) {
  __m512i l;
  _mm512_storeu_si512(hi, ConvertPairs(src, lo ? &l : nullptr));
  if (lo) _mm512_storeu_si512(lo, l);
}

LOOM_AMX void PackActivationsAmx(const float* x, int64_t n, int64_t k, bool split, uint16_t* out) {
  PackActivationsAmxGroups(x, n, k, split, out, 0, (n + kTile - 1) / kTile);
}

LOOM_AMX void PackActivationsAmxGroups(const float* x, int64_t n, int64_t k, bool split,
                                       uint16_t* out, int64_t g0, int64_t g1) {
  const int64_t groups = (n + kTile - 1) / kTile;
  const int64_t steps = k / 32;
  const int64_t lo_offset = groups * kTile * k;
  alignas(64) uint32_t hi[16], lo[16];
  for (int64_t g = g0; g < g1; ++g) {
    // A partial group (decode: often one row) zeroes its tiles once with vector stores and
    // scatters only its rows, instead of scattering 16 zero columns per step.
    const int64_t valid = std::min<int64_t>(kTile, n - g * kTile);
    if (valid < kTile) {
      std::memset(out + g * steps * 512, 0, static_cast<size_t>(steps) * 512 * 2);
      if (split) std::memset(out + lo_offset + g * steps * 512, 0, static_cast<size_t>(steps) * 512 * 2);
    }
    for (int64_t s = 0; s < steps; ++s) {
      // Tile row r, dword col = the pair x[g*16 + col][s*32 + 2r .. + 1].
      auto* tile = reinterpret_cast<uint32_t*>(out + (g * steps + s) * 512);
      auto* tile_lo = reinterpret_cast<uint32_t*>(out + lo_offset + (g * steps + s) * 512);
      if (valid == kTile) {
        // A full group: the 16 rows' pairs as a 16×16 dword matrix, transposed in registers
        // (the shuffles move bits, they round nothing) and stored as 16 whole tile rows.
        __m512 hi_rows[16], lo_rows[16];
        for (int64_t col = 0; col < kTile; ++col) {
          __m512i l;
          hi_rows[col] = _mm512_castsi512_ps(
              ConvertPairs(x + (g * kTile + col) * k + s * 32, split ? &l : nullptr));
          if (split) lo_rows[col] = _mm512_castsi512_ps(l);
        }
        Transpose16(hi_rows);
        for (int r = 0; r < 16; ++r)
          _mm512_storeu_ps(reinterpret_cast<float*>(tile + r * 16), hi_rows[r]);
        if (split) {
          Transpose16(lo_rows);
          for (int r = 0; r < 16; ++r)
            _mm512_storeu_ps(reinterpret_cast<float*>(tile_lo + r * 16), lo_rows[r]);
        }
        continue;
      }
      for (int64_t col = 0; col < valid; ++col) {
        const int64_t row = g * kTile + col;
        ConvertPairs(x + row * k + s * 32, hi, split ? lo : nullptr);
        for (int r = 0; r < 16; ++r) tile[r * 16 + col] = hi[r];
        if (split) {
          for (int r = 0; r < 16; ++r) tile_lo[r * 16 + col] = lo[r];
        }
      }
    }
  }
}

// One activation row, without packing a 16-row group: the B tile is loaded straight from the
// row's bf16 values with a 4-byte row stride, so tile row r, column 0 is the pair
// x[s·32 + 2r, +1] exactly as in a packed group (columns 1..15 read later pairs and are
// discarded). Column 0 of the C tile gets the same tile products in the same order as the row
// gets from Kernel in any group and any position, so the bits are those of MatmulBf16Amx.
LOOM_AMX void MatmulBf16AmxRow(const float* x, bool split, int64_t k, const uint16_t* w, int64_t j0,
                               int64_t j1, float* y) {
  // The row as bf16 (and its residuals), with 64 zero bytes after it for the last step's
  // overlapping tile rows.
  static thread_local std::vector<uint16_t> hi, lo;
  hi.resize(static_cast<size_t>(k + 32));
  std::fill(hi.begin() + k, hi.end(), uint16_t{0});
  if (split) {
    lo.resize(static_cast<size_t>(k + 32));
    std::fill(lo.begin() + k, lo.end(), uint16_t{0});
  }
  for (int64_t i = 0; i < k; i += 32) {
    ConvertPairs(x + i, reinterpret_cast<uint32_t*>(hi.data() + i),
                 split ? reinterpret_cast<uint32_t*>(lo.data() + i) : nullptr);
  }
  const int64_t steps = k / 32;
  alignas(64) float c[kTile * kTile];  // [weight row][activation column]
  for (int64_t j = j0; j < j1; j += kTile) {
    const int64_t rows = std::min<int64_t>(kTile, j1 - j);
    const uint16_t* wj = w + j * k;
    // Fewer than 16 weight rows (a tail, or a rank cut over the workers): tiles of that many
    // rows, so no padded copy and no row read twice.
    ConfigureAmxTileRows(static_cast<int>(rows));
    _tile_zero(0);
    for (int64_t s = 0; s < steps; ++s) {
      // The weight rows are up to 16 streams, more than the hardware prefetcher follows: ask
      // for each row's line kRowPrefetch steps ahead (decode reads them from DRAM or L3).
      constexpr int64_t kRowPrefetch = 6;
      if (s + kRowPrefetch < steps) {
        for (int64_t r = 0; r < rows; ++r) {
          _mm_prefetch(reinterpret_cast<const char*>(wj + r * k + (s + kRowPrefetch) * 32), _MM_HINT_T0);
        }
      }
      _tile_loadd(4, wj + s * 32, k * 2);
      _tile_loadd(6, hi.data() + s * 32, 4);
      _tile_dpbf16ps(0, 4, 6);
      if (split) {
        _tile_loadd(6, lo.data() + s * 32, 4);
        _tile_dpbf16ps(0, 4, 6);
      }
    }
    _tile_stored(0, c, 64);
    for (int64_t r = 0; r < rows; ++r) y[j + r] = c[r * kTile];
  }
}

size_t AmxPackedWeightSize(int64_t m, int64_t k) {
  return static_cast<size_t>((m + kTile - 1) / kTile * kTile * k);
}

void PackWeightAmx(const uint16_t* w, int64_t m, int64_t k, int64_t p0, int64_t p1, uint16_t* out) {
  const int64_t steps = k / 32;
  for (int64_t p = p0; p < p1; ++p) {
    uint16_t* panel = out + p * steps * 512;
    for (int64_t s = 0; s < steps; ++s) {
      for (int64_t r = 0; r < kTile; ++r) {
        uint16_t* dst = panel + s * 512 + r * 32;
        const int64_t row = p * kTile + r;
        if (row < m) {
          std::memcpy(dst, w + row * k + s * 32, 64);
        } else {
          std::memset(dst, 0, 64);  // past the last weight row: a zero row, never stored out
        }
      }
    }
  }
}

LOOM_AMX void MatmulBf16AmxPacked(const uint16_t* xp, bool split, int64_t n, int64_t k,
                                  const uint16_t* w, int64_t j0, int64_t j1, float* y,
                                  int64_t ldy) {
  const int64_t lo_offset = static_cast<int64_t>(PackedActivationsAmxSize(n, k, false));
  if (split) return Kernel<true, true>(xp, lo_offset, n, k, w, j0, j1, y, ldy);
  Kernel<false, true>(xp, 0, n, k, w, j0, j1, y, ldy);
}

LOOM_AMX void MatmulBf16AmxPackedSiluMul(const uint16_t* xp, bool split, int64_t n, int64_t k,
                                         const uint16_t* gate, const uint16_t* up, int64_t j0,
                                         int64_t j1, float* y, int64_t ldy) {
  const int64_t lo_offset = static_cast<int64_t>(PackedActivationsAmxSize(n, k, false));
  if (split) return SiluMulKernel<true>(xp, lo_offset, n, k, gate, up, j0, j1, y, ldy);
  SiluMulKernel<false>(xp, 0, n, k, gate, up, j0, j1, y, ldy);
}

LOOM_AMX void MatmulBf16Amx(const uint16_t* xp, bool split, int64_t n, int64_t k,
                            const uint16_t* w, int64_t j0, int64_t j1, float* y, int64_t ldy) {
  const int64_t lo_offset = static_cast<int64_t>(PackedActivationsAmxSize(n, k, false));
  if (split) return Kernel<true>(xp, lo_offset, n, k, w, j0, j1, y, ldy);
  Kernel<false>(xp, 0, n, k, w, j0, j1, y, ldy);
}

}  // namespace loom::cpu
