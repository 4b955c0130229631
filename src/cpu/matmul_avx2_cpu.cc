// AVX2+FMA matmul kernel (f32 activations): register tiles of 8-lane accumulators, weights widened in registers (or, in prefill at k ≤ 1024, once per 4-row group).
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "cpu/avx2_reduce.h"
#include "cpu/avx2_widen.h"
#include "cpu/matmul_cpu.h"

#define LOOM_AVX2 __attribute__((target("avx2,fma,f16c")))

namespace loom::cpu {

namespace {

// Weight loaders: 8 values widened to f32 (Full) or one (One). Prefill: the loader the
// compute-bound tiles use (the same values).
struct LoadF32 {
  using T = float;
  LOOM_AVX2 static __m256 Full(const float* p) { return _mm256_loadu_ps(p); }
  static float One(const float* p) { return *p; }
  using Prefill = LoadF32;
};
// bf16 through one shuffle per 8 weights (avx2_widen.h): 2 threads, Zen 3, 9 interleaved rounds,
// median / max: 128 × (896 × 4864) 149 / 152 → 150 / 157 GFLOP/s, 128 × (8192 × 2048) 150 / 154
// → 156 / 163; Llama-3.2-1B-shaped bf16 prefill +2–8 %.
struct LoadBf16Shuffled {
  using T = uint16_t;
  LOOM_AVX2 static __m256 Full(const uint16_t* p) { return Bf16x8ToF32Shuffled(p); }
  static float One(const uint16_t* p) { return Bf16ToF32(*p); }
};
struct LoadBf16 {
  using T = uint16_t;
  LOOM_AVX2 static __m256 Full(const uint16_t* p) { return Bf16x8ToF32(p); }
  static float One(const uint16_t* p) { return Bf16ToF32(*p); }
  using Prefill = LoadBf16Shuffled;
};
struct LoadF16 {
  using T = uint16_t;
  LOOM_AVX2 static __m256 Full(const uint16_t* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static float One(const uint16_t* p) { return F16ToF32(*p); }
  using Prefill = LoadF16;
};

// y[a][b] = Σ_p x[a][p]·w[b][p] for NI activation rows × NJ weight rows; each output sums its own
// 8 lanes in p order, then the lanes, then the tail, whatever the tile shape (batch invariance).
// Tile weight row b is row b·rs of w (rs = 1: neighbours; rs > 1: one row from each of NJ
// streams, see Streams), its output y[a·ldy + b·rs].
// PF (kPfAll: the first row tile): prefetch row b·rs + next of w, the row this tile's successor
// reads in place of row b (next = NJ for neighbours, 1 for streams). Decode streams every weight
// once from DRAM, rows of only k elements (896 bf16 = 28 cache lines on the bench model), too
// short for the hardware prefetcher to ramp up. On a Zen 3 (AVX2) VM the lm_head (151936 × 896
// bf16, n = 1, 2 threads) went from 9.6-10.2 to 12.6 GB/s with neighbours (loom_kernel_bench,
// median of 5, interleaved); two tiles ahead measured the same; 2 KiB ahead within the row (as
// the AVX-512 kernel) and 3 × 4 tiles measured slower.
// Which weight lines a tile prefetches: none, every line of the rows `next` ahead, or the lines
// ≡ phase (mod period) of them (see Rows).
enum PfMode { kPfNone, kPfAll, kPfSpread };

// A tile's outputs, shared by Tile and WideTile: y[a·ldy + b·rs] = the lanes of acc[a][b] summed
// in Sum8's order (four accumulators at a time through Sum8x4: the same bits in 12 instructions
// instead of 24), then the products past kfull in p order. 2 threads, Zen 3, interleaved: the
// 3 × 4 tiles +4–5 % in two windows, level in a third; the 4 × 3 tiles within noise
// (docs/PERFORMANCE.md).
template <typename L, int NI, int NJ>
LOOM_AVX2 inline void StoreTile(const __m256 (&acc)[NI][NJ], const float* x, int64_t k,
                                int64_t kfull, const typename L::T* w, int64_t rs, float* y,
                                int64_t ldy) {
  constexpr int kAll = NI * NJ;
  alignas(16) float sums[kAll];
  for (int q = 0; q + 4 <= kAll; q += 4) {
    _mm_store_ps(sums + q, Sum8x4(acc[q / NJ][q % NJ], acc[(q + 1) / NJ][(q + 1) % NJ],
                                  acc[(q + 2) / NJ][(q + 2) % NJ], acc[(q + 3) / NJ][(q + 3) % NJ]));
  }
  for (int q = kAll / 4 * 4; q < kAll; ++q) sums[q] = Sum8(acc[q / NJ][q % NJ]);
  for (int a = 0; a < NI; ++a) {
    for (int b = 0; b < NJ; ++b) {
      float s = sums[a * NJ + b];
      // An explicit fma: whether the compiler contracts `s += x * w` may depend on how L::One
      // is inlined, and every tile shape and weight dtype must give a row the same bits.
      for (int64_t p = kfull; p < k; ++p) s = std::fma(x[a * k + p], L::One(w + b * rs * k + p), s);
      y[a * ldy + b * rs] = s;
    }
  }
}

template <typename L, int NI, int NJ, int PF>
LOOM_AVX2 void Tile(const float* x, int64_t k, const typename L::T* w, int64_t rs, int64_t next,
                    float* y, int64_t ldy, int64_t phase = 0, int64_t period = 1) {
  constexpr int64_t kLine = 64 / sizeof(typename L::T);  // elements per cache line
  __m256 acc[NI][NJ];
  for (int a = 0; a < NI; ++a)
    for (int b = 0; b < NJ; ++b) acc[a][b] = _mm256_setzero_ps();
  const int64_t kfull = k & ~int64_t{7};
  int64_t line = 0;  // cache lines into the row; this tile prefetches those ≡ phase (mod period)
  for (int64_t p = 0; p < kfull; p += 8) {
    if (PF != kPfNone && (p & (kLine - 1)) == 0) {
      if (PF == kPfAll || line == phase) {
        for (int b = 0; b < NJ; ++b)
          _mm_prefetch(reinterpret_cast<const char*>(w + (b * rs + next) * k + p), _MM_HINT_T0);
      }
      if (PF == kPfSpread && ++line == period) line = 0;
    }
    __m256 wv[NJ];
    for (int b = 0; b < NJ; ++b) wv[b] = L::Full(w + b * rs * k + p);
    for (int a = 0; a < NI; ++a) {
      __m256 xv = _mm256_loadu_ps(x + a * k + p);
      for (int b = 0; b < NJ; ++b) acc[a][b] = _mm256_fmadd_ps(xv, wv[b], acc[a][b]);
    }
  }
  StoreTile<L, NI, NJ>(acc, x, k, kfull, w, rs, y, ldy);
}

// NI × NJ tiles with the one-tile-ahead weight prefetch (PfMode; spread: lines phase, phase +
// period, …).
template <typename L, int NJ, int PF>
LOOM_AVX2 void RowTile(int64_t ni, const float* x, int64_t k, const typename L::T* w, int64_t rs,
                       int64_t next, float* y, int64_t ldy, int64_t phase = 0,
                       int64_t period = 1) {
  switch (ni) {
    case 4: return Tile<L, 4, NJ, PF>(x, k, w, rs, next, y, ldy, phase, period);
    case 3: return Tile<L, 3, NJ, PF>(x, k, w, rs, next, y, ldy, phase, period);
    case 2: return Tile<L, 2, NJ, PF>(x, k, w, rs, next, y, ldy, phase, period);
    default: return Tile<L, 1, NJ, PF>(x, k, w, rs, next, y, ldy, phase, period);
  }
}

// Every activation row against NJ neighbouring weight rows, 4 rows at a time, the row tiles
// prefetching the next NJ weight rows between them: tile i of T the cache lines ≡ i (mod T), so
// the requests go out evenly over the group's compute instead of in one burst. The first tile
// prefetching the whole next group took the lm_head at 8 rows (151936 × 896 bf16, from DRAM)
// from 73 to 109 GFLOP/s on a Zen 2; spreading it, 101 → 115-120 GFLOP/s (12.7 → 14.4-15.1 GB/s,
// loom_kernel_bench, 2 threads, interleaved), bf16 decode at batch 8 +7-10 %. Prefetching a
// second time 8 or 32 groups ahead into L2, and taking groups from 2 or 4 streams, added nothing.
// Only for decode-sized calls (`spread`: at most kSpreadRowsMax rows in all). In prefill
// (compute-bound, the weights in L2) the first tile prefetches the whole next group and the others
// run without the line count: spread there measured ~3 % slower.
inline constexpr int64_t kSpreadRowsMax = 16;
template <typename L, int NJ>
LOOM_AVX2 void Rows(const float* x, int64_t n, int64_t k, const typename L::T* w, float* y,
                    int64_t ldy, bool spread) {
  if (!spread) {
    RowTile<L, NJ, kPfAll>(std::min<int64_t>(4, n), x, k, w, 1, NJ, y, ldy);
    for (int64_t i = 4; i < n; i += 4) {
      RowTile<L, NJ, kPfNone>(std::min<int64_t>(4, n - i), x + i * k, k, w, 1, NJ, y + i * ldy,
                              ldy);
    }
    return;
  }
  const int64_t tiles = (n + 3) / 4;
  for (int64_t i = 0; i < n; i += 4) {
    RowTile<L, NJ, kPfSpread>(std::min<int64_t>(4, n - i), x + i * k, k, w, 1, NJ, y + i * ldy,
                              ldy, i / 4, tiles);
  }
}

// Weight rows in groups of NJ. From 3 activation rows a 4 × 3 tile: 12 accumulators, 3 weight
// vectors, 1 activation vector, AVX2's 16 registers (a 4 × 4 tile needs 21 and spills); 1.5× the
// 4 × 4 tile's rate at 4-512 rows (e.g. 4864 × 896 at 128 rows: 109 → 168 GFLOP/s, 2 threads, of a
// 214 GFLOP/s FMA peak; loom_kernel_bench BM_Matmul and BM_F32FmaPeakAvx2 on a Zen 2). One and two
// rows go through Streams (4 rows a tile, more independent chains per weight load; 2 × 4 is 8
// accumulators), which leaves the block's last 0-3 weight rows to groups of 3, 2 or 1 here.
template <typename L, int NJ>
LOOM_AVX2 void Groups(const float* x, int64_t n, int64_t k, const typename L::T* w, int64_t j0,
                      int64_t j1, float* y, int64_t ldy, bool spread) {
  int64_t j = j0;
  for (; j + NJ <= j1; j += NJ) Rows<L, NJ>(x, n, k, w + j * k, y + j, ldy, spread);
  switch (j1 - j) {
    case 3: Rows<L, 3>(x, n, k, w + j * k, y + j, ldy, spread); break;
    case 2: Rows<L, 2>(x, n, k, w + j * k, y + j, ldy, spread); break;
    case 1: Rows<L, 1>(x, n, k, w + j * k, y + j, ldy, spread); break;
    default: break;
  }
}

// One or two activation rows (decode): the block's weight rows as 4 streams, tile i taking row i
// of each quarter, each stream prefetching its next row. Neighbouring rows (a 7 KiB window at a
// time, the next tile prefetched) streamed 11.4 GB/s on one Zen 2 core from DRAM, 4 streams 14.4
// (the core's read bandwidth: 15); 2 threads on the lm_head 21.5 → 24 GB/s (151936 × 896 bf16);
// bf16 decode on the 0.5B shape 20.6 → 27.3 tok/s (median of 5, interleaved with the old binary).
// Same bits: a tile's outputs are independent of which rows share it.
template <typename L>
LOOM_AVX2 void Streams(const float* x, int64_t n, int64_t k, const typename L::T* w, int64_t j0,
                       int64_t j1, float* y, int64_t ldy) {
  const int64_t q = (j1 - j0) / 4;
  for (int64_t i = 0; i < q; ++i) {
    RowTile<L, 4, kPfAll>(n, x, k, w + (j0 + i) * k, q, 1, y + j0 + i, ldy);
  }
  Groups<L, 4>(x, n, k, w, j0 + 4 * q, j1, y, ldy, true);
}

// Prefill (more than kSpreadRowsMax rows) at k ≤ kWideMax: each group of 4 weight rows widened to
// f32 once (≤ 16 KiB: L1; 14 KiB at the bench model's k = 896), then every activation row against
// it in 3 × 4 tiles: 12 accumulators, 3 activation vectors and one weight vector (16 registers),
// 3 activation loads per 12 fmas where the 4 × 3 tile on bf16 made 4 (the activation rows stream
// from L2 for every group) and no shuffle-port uops in the loop. Each output is Tile's
// arithmetic (8 lanes in p order, the lanes, the tail), so the same bits as a row alone.
// 128 × (4864 × 896) bf16, 2 threads, Zen 3: 128–153 → 158–167 GFLOP/s (loom_kernel_bench,
// interleaved). Past k = 1024 the widened rows crowd L1 out: 128 × (8192 × 2048) 126–133
// against 143–152 GFLOP/s; at k = 4864 (78 KiB, and row blocks of 12 rows) 121 against 144, and
// 4 rows widened per 1024-input chunk with the accumulators kept between chunks 3–9 % slower
// than the 4 × 3 tile; a 2 × 6 tile measured 116 at k = 896. At 4–16 rows (decode, weights from
// DRAM) widening and computing run in series: 8 rows of the lm_head 82–103 against 122–127.
inline constexpr int64_t kWideMax = 1024;

template <typename L, int NI>
LOOM_AVX2 void WideTile(const float* x, int64_t k, const float* wf, const typename L::T* w,
                        float* y, int64_t ldy) {
  __m256 acc[NI][4];
  for (int a = 0; a < NI; ++a) {
    for (int b = 0; b < 4; ++b) acc[a][b] = _mm256_setzero_ps();
  }
  const int64_t kfull = k & ~int64_t{7};
  for (int64_t p = 0; p < kfull; p += 8) {
    __m256 xv[NI];
    for (int a = 0; a < NI; ++a) xv[a] = _mm256_loadu_ps(x + a * k + p);
    for (int b = 0; b < 4; ++b) {
      const __m256 wv = _mm256_load_ps(wf + b * kWideMax + p);
      for (int a = 0; a < NI; ++a) acc[a][b] = _mm256_fmadd_ps(xv[a], wv, acc[a][b]);
    }
  }
  StoreTile<L, NI, 4>(acc, x, k, kfull, w, 1, y, ldy);
}

// Weight rows [j0, j0 + 4·⌊(j1 − j0)/4⌋) against the n rows of x (k ≤ kWideMax) as above;
// returns the first weight row not done.
template <typename L>
LOOM_AVX2 int64_t WideGroups(const float* x, int64_t n, int64_t k, const typename L::T* w,
                             int64_t j0, int64_t j1, float* y, int64_t ldy) {
  alignas(32) float wf[4 * kWideMax];
  const int64_t kfull = k & ~int64_t{7};
  int64_t j = j0;
  for (; j + 4 <= j1; j += 4) {
    const typename L::T* wg = w + j * k;
    for (int b = 0; b < 4; ++b) {
      for (int64_t p = 0; p < kfull; p += 8) {
        _mm256_store_ps(wf + b * kWideMax + p, L::Full(wg + b * k + p));
      }
    }
    int64_t i = 0;
    for (; i + 3 <= n; i += 3) WideTile<L, 3>(x + i * k, k, wf, wg, y + i * ldy + j, ldy);
    if (n - i == 2) WideTile<L, 2>(x + i * k, k, wf, wg, y + i * ldy + j, ldy);
    if (n - i == 1) WideTile<L, 1>(x + i * k, k, wf, wg, y + i * ldy + j, ldy);
  }
  return j;
}

template <typename L>
LOOM_AVX2 void Kernel(const float* x, int64_t n, int64_t k, const void* wv, int64_t j0,
                      int64_t j1, float* y, int64_t ldy) {
  const auto* w = static_cast<const typename L::T*>(wv);
  if (n <= 0) return;
  if (n < 3) return Streams<L>(x, n, k, w, j0, j1, y, ldy);
  // Activation rows in blocks of ≤ 256 KiB (L2), each block against every weight group: without
  // it each 3-row weight group sweeps all n rows of x from L3 or DRAM (a 512-token prefill chunk
  // is 1.8 MiB of x at k = 896, 9.5 MiB at k = 4864). Engine prefill at batch 8 (chunks of 512
  // rows): 116 → 181 tok/s; 192 KiB and 384 KiB blocks measured the same within noise.
  constexpr int64_t kBlockBytes = 256 * 1024;
  const int64_t rb = std::max<int64_t>(4, kBlockBytes / (4 * k) / 4 * 4);
  const bool wide = n > kSpreadRowsMax && k <= kWideMax;
  for (int64_t i = 0; i < n; i += rb) {
    const int64_t rows = std::min(rb, n - i);
    int64_t j = j0;
    if (wide) j = WideGroups<L>(x + i * k, rows, k, w, j0, j1, y + i * ldy, ldy);
    if (n > kSpreadRowsMax) {
      Groups<typename L::Prefill, 3>(x + i * k, rows, k, w, j, j1, y + i * ldy, ldy, false);
    } else {
      Groups<L, 3>(x + i * k, rows, k, w, j, j1, y + i * ldy, ldy, true);
    }
  }
}

}  // namespace

LOOM_AVX2 void MatmulF32Avx2(DType wtype, const float* x, int64_t n, int64_t k, const void* w,
                             int64_t j0, int64_t j1, float* y, int64_t ldy) {
  switch (wtype) {
    case DType::kF32: return Kernel<LoadF32>(x, n, k, w, j0, j1, y, ldy);
    case DType::kF16: return Kernel<LoadF16>(x, n, k, w, j0, j1, y, ldy);
    case DType::kBF16: return Kernel<LoadBf16>(x, n, k, w, j0, j1, y, ldy);
  }
}

}  // namespace loom::cpu
