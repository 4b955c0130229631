// bitsandbytes 4-bit (NF4/FP4) matmul with AVX2: each 16-column panel as two 8-lane halves; the 16-entry code table looked
// up as 4 vpshufb byte planes, 32 codes at a time; the same fma sequence as the scalar kernel.
#include <immintrin.h>

#include <cstring>

#include "cpu/nf4_cpu.h"
#include "tensor/tensor.h"

#define LOOM_AVX2 __attribute__((target("avx2,fma")))

namespace loom::cpu {

namespace {

// From this many rows a panel's codes are looked up once and kept as f32 (DecodedRows): the
// lookup (~14 shuffles per 32 codes) is shared by every row instead of 4.
constexpr int64_t kDecodeFromRows = 8;
constexpr int kDecodedRows = 4;  // rows per DecodedTile

// The code table as 4 byte planes (plane b: byte b of each f32 code, little-endian), each in
// both 128-bit lanes: vpshufb looks 32 indices up per plane, where vpermps (0.5 per cycle on a
// Zen 2, measured) looked up 8.
struct CodePlanes {
  __m256i plane[4];
};
// The planes of a 16-entry f32 code (once per kernel call: 64 bytes).
LOOM_AVX2 inline CodePlanes LoadCodePlanes(const float* code) {
  alignas(16) uint8_t bytes[4][16];
  for (int q = 0; q < 16; ++q) {
    uint32_t bits;
    std::memcpy(&bits, &code[q], 4);
    for (int b = 0; b < 4; ++b) bytes[b][q] = static_cast<uint8_t>(bits >> (8 * b));
  }
  CodePlanes c;
  for (int b = 0; b < 4; ++b) {
    c.plane[b] =
        _mm256_broadcastsi128_si256(_mm_load_si128(reinterpret_cast<const __m128i*>(bytes[b])));
  }
  return c;
}

// One 16-byte chunk (16 columns × inputs 2t, 2t + 1) → w[0] columns 0–7 and w[1] columns 8–15 of
// input 2t, w[2], w[3] the same of input 2t + 1, as f32 codes. The chunk's nibbles are arranged
// so that the byte-plane interleave (vpunpck{l,h}bw then {l,h}wd, within each 128-bit lane) lands
// each column in its lane: lane 0 takes columns 0–3 and 8–11, lane 1 columns 4–7 and 12–15; byte
// positions 0–7 the low nibbles (input 2t), 8–15 the high ones.
LOOM_AVX2 inline void LookupChunk(const uint8_t* chunk, const CodePlanes& c, __m256 w[4]) {
  const __m256i order = _mm256_setr_epi8(0, 1, 2, 3, 8, 9, 10, 11, 0, 1, 2, 3, 8, 9, 10, 11,
                                         4, 5, 6, 7, 12, 13, 14, 15, 4, 5, 6, 7, 12, 13, 14, 15);
  const __m256i lo_half = _mm256_setr_epi64x(0x0F0F0F0F0F0F0F0F, 0, 0x0F0F0F0F0F0F0F0F, 0);
  const __m256i hi_half = _mm256_setr_epi64x(0, 0x0F0F0F0F0F0F0F0F, 0, 0x0F0F0F0F0F0F0F0F);
  const __m256i v = _mm256_shuffle_epi8(
      _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(chunk))), order);
  const __m256i idx = _mm256_or_si256(_mm256_and_si256(v, lo_half),
                                      _mm256_and_si256(_mm256_srli_epi16(v, 4), hi_half));
  const __m256i b0 = _mm256_shuffle_epi8(c.plane[0], idx), b1 = _mm256_shuffle_epi8(c.plane[1], idx);
  const __m256i b2 = _mm256_shuffle_epi8(c.plane[2], idx), b3 = _mm256_shuffle_epi8(c.plane[3], idx);
  const __m256i l01 = _mm256_unpacklo_epi8(b0, b1), l23 = _mm256_unpacklo_epi8(b2, b3);
  const __m256i h01 = _mm256_unpackhi_epi8(b0, b1), h23 = _mm256_unpackhi_epi8(b2, b3);
  w[0] = _mm256_castsi256_ps(_mm256_unpacklo_epi16(l01, l23));  // positions 0–3
  w[1] = _mm256_castsi256_ps(_mm256_unpackhi_epi16(l01, l23));  // 4–7
  w[2] = _mm256_castsi256_ps(_mm256_unpacklo_epi16(h01, h23));  // 8–11
  w[3] = _mm256_castsi256_ps(_mm256_unpackhi_epi16(h01, h23));  // 12–15
}

// R rows × P panels from panel p0, `cols` valid columns in the tile's last panel; per (row,
// column) MatmulNf4's contract (nf4_cpu.h), so the scalar kernel's bits.
template <int R, int P>
LOOM_AVX2 inline void Tile(const float* x, int64_t k, const uint8_t* wq, const float* absmax,
                           int64_t block, const CodePlanes& planes, int64_t p0, int cols,
                           float* y, int64_t ldy) {
  const int64_t blocks = k / block, panel_bytes = kNf4Panel * k / 2;
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
        __m256 w[4];
        const uint8_t* at = wq + (p0 + p) * panel_bytes + (i / 2) * kNf4Panel;
        if ((i & 7) == 0)
          _mm_prefetch(reinterpret_cast<const char*>(at) + kNf4PrefetchAhead, _MM_HINT_T0);
        LookupChunk(at, planes, w);
        w0[p][0] = w[0];
        w0[p][1] = w[1];
        w1[p][0] = w[2];
        w1[p][1] = w[3];
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
                    int64_t block, const CodePlanes& planes, int64_t j0, int64_t j1, float* y,
                    int64_t ldy) {
  int64_t j = j0;
  for (; j + P * kNf4Panel <= j1; j += P * kNf4Panel) {
    Tile<R, P>(x, k, wq, absmax, block, planes, j / kNf4Panel, kNf4Panel, y + (j - j0), ldy);
  }
  for (; j < j1; j += kNf4Panel) {
    const int cols = static_cast<int>(j1 - j < kNf4Panel ? j1 - j : kNf4Panel);
    Tile<R, 1>(x, k, wq, absmax, block, planes, j / kNf4Panel, cols, y + (j - j0), ldy);
  }
}

// Many rows: each panel's codes are looked up once into `codes` ([k, 16] f32, input-major),
// then R rows at a time run on them; the fma sequence per (row, column) is Tile's.
template <int R>
LOOM_AVX2 inline void DecodedTile(const float* x, int64_t k, const float* codes,
                                  const float* absmax, int64_t block, int cols, float* y,
                                  int64_t ldy) {
  const int64_t blocks = k / block;
  __m256 acc[R][2];
  for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
  for (int64_t b = 0; b < blocks; ++b) {
    __m256 t[R][2];
    for (int r = 0; r < R; ++r) t[r][0] = t[r][1] = _mm256_setzero_ps();
    for (int64_t i = b * block; i < (b + 1) * block; ++i) {
      const __m256 w0 = _mm256_load_ps(codes + i * kNf4Panel);
      const __m256 w1 = _mm256_load_ps(codes + i * kNf4Panel + 8);
      for (int r = 0; r < R; ++r) {
        const __m256 xv = _mm256_broadcast_ss(x + r * k + i);
        t[r][0] = _mm256_fmadd_ps(w0, xv, t[r][0]);
        t[r][1] = _mm256_fmadd_ps(w1, xv, t[r][1]);
      }
    }
    const __m256 am0 = _mm256_loadu_ps(absmax + b * kNf4Panel);
    const __m256 am1 = _mm256_loadu_ps(absmax + b * kNf4Panel + 8);
    for (int r = 0; r < R; ++r) {
      acc[r][0] = _mm256_fmadd_ps(t[r][0], am0, acc[r][0]);
      acc[r][1] = _mm256_fmadd_ps(t[r][1], am1, acc[r][1]);
    }
  }
  for (int r = 0; r < R; ++r) {
    float* out = y + r * ldy;
    if (cols < kNf4Panel) {
      alignas(32) float tmp[16];
      _mm256_store_ps(tmp, acc[r][0]);
      _mm256_store_ps(tmp + 8, acc[r][1]);
      for (int c = 0; c < cols; ++c) out[c] = tmp[c];
    } else {
      _mm256_storeu_ps(out, acc[r][0]);
      _mm256_storeu_ps(out + 8, acc[r][1]);
    }
  }
}

// False (nothing written) when the [k, 16] buffer cannot be had: the caller looks codes up per
// tile.
LOOM_AVX2 bool DecodedRows(const float* x, int64_t n, int64_t k, const uint8_t* wq,
                           const float* absmax, int64_t block, const CodePlanes& planes, int64_t j0,
                           int64_t j1, float* y, int64_t ldy) {
  static thread_local AlignedBuffer<float> codes;  // [k, 16]: this thread's current panel
  if (!codes.Resize(static_cast<size_t>(k * kNf4Panel)).ok()) return false;
  const int64_t blocks = k / block, panel_bytes = kNf4Panel * k / 2;
  for (int64_t j = j0; j < j1; j += kNf4Panel) {
    const int64_t p = j / kNf4Panel;
    const int cols = static_cast<int>(j1 - j < kNf4Panel ? j1 - j : kNf4Panel);
    for (int64_t i = 0; i < k; i += 2) {
      __m256 w[4];
      const uint8_t* at = wq + p * panel_bytes + (i / 2) * kNf4Panel;
      if ((i & 7) == 0)
        _mm_prefetch(reinterpret_cast<const char*>(at) + kNf4PrefetchAhead, _MM_HINT_T0);
      LookupChunk(at, planes, w);
      float* c = codes.data() + i * kNf4Panel;
      _mm256_store_ps(c, w[0]);
      _mm256_store_ps(c + 8, w[1]);
      _mm256_store_ps(c + 16, w[2]);
      _mm256_store_ps(c + 24, w[3]);
    }
    const float* am = absmax + p * blocks * kNf4Panel;
    float* out = y + (j - j0);
    int64_t r = 0;
    for (; r + kDecodedRows <= n; r += kDecodedRows) {
      DecodedTile<kDecodedRows>(x + r * k, k, codes.data(), am, block, cols, out + r * ldy, ldy);
    }
    for (; r + 2 <= n; r += 2)
      DecodedTile<2>(x + r * k, k, codes.data(), am, block, cols, out + r * ldy, ldy);
    for (; r < n; ++r)
      DecodedTile<1>(x + r * k, k, codes.data(), am, block, cols, out + r * ldy, ldy);
  }
  return true;
}

}  // namespace

void MatmulNf4Avx2(const float* x, int64_t n, int64_t k, const uint8_t* wq, const float* absmax,
                   int64_t block, const float* code, int64_t j0, int64_t j1, float* y,
                   int64_t ldy) {
  // 4-row tiles share each lookup among 4 rows instead of 2. Zen 2, 4864 × 896, block 64, 2
  // threads (loom_quant_bench BM_Nf4), with the vpermps lookup: 8 and 128 rows 35-40 → 53-61
  // GFLOP/s (6-row tiles 50-72 and 50-60); then the vpshufb byte planes: 1 row 23 → 39-43, 8 rows
  // 62 → 86-103, 128 rows 63 → 99-103. One row was bound by the lookups, not by the fma chains
  // (two blocks' chains interleaved measured the same).
  const CodePlanes p = LoadCodePlanes(code);
  if (n >= kDecodeFromRows && DecodedRows(x, n, k, wq, absmax, block, p, j0, j1, y, ldy)) return;
  int64_t r = 0;
  for (; r + 4 <= n; r += 4) Rows<4, 1>(x + r * k, k, wq, absmax, block, p, j0, j1, y + r * ldy, ldy);
  for (; r + 2 <= n; r += 2) Rows<2, 1>(x + r * k, k, wq, absmax, block, p, j0, j1, y + r * ldy, ldy);
  for (; r < n; ++r) Rows<1, 2>(x + r * k, k, wq, absmax, block, p, j0, j1, y + r * ldy, ldy);
}

}  // namespace loom::cpu
