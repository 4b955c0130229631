// AVX-512 matmul kernels: register tiles of 4 activation rows × 4 weight rows, 16 zmm
// accumulators; each weight vector loaded once per tile feeds 4 rows (decode reads every
// weight byte exactly once per step, so n ≤ 4 rows cost one pass over W).
// GCC 12 warns falsely inside its own AVX-512 headers (_mm512_undefined_* in reductions).
#pragma GCC diagnostic ignored "-Wuninitialized"
#if !defined(__clang__)  // gcc-only warnings
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wpsabi"  // a lambda returning __m256 inside an AVX-512 function
#endif
#include <immintrin.h>

#include <algorithm>

#include "cpu/matmul_cpu.h"
#include "cpu/widen16_avx512.h"

// Isa::kAvx512 (no BF16): the vdpbf16ps kernel is in matmul_avx512bf16_cpu.cc.
#define LOOM_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma,f16c")))

namespace loom::cpu {

namespace {

// Sums of four accumulators as one __m128 {Σa, Σb, Σc, Σd}: 13 shuffles/adds instead of
// four full horizontal reductions (which dominated short-k tiles).
LOOM_AVX512 inline __m128 Reduce4(__m512 a, __m512 b, __m512 c, __m512 d) {
  auto half = [](__m512 v) LOOM_AVX512 {
    return _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
  };
  const __m256 h = _mm256_hadd_ps(_mm256_hadd_ps(half(a), half(b)), _mm256_hadd_ps(half(c), half(d)));
  return _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
}

// Writes acc[a][0..NJ) to y[a * ldy + 0..NJ). Narrower tiles (a column range's last 1-3
// columns) reduce through the same Reduce4 tree with zero accumulators beside them, so a
// column's sum has the same bits whatever tile width the range's bounds give it.
template <int NI, int NJ>
LOOM_AVX512 inline void StoreTile(__m512 (&acc)[NI][NJ], float* y, int64_t ldy) {
  const __m512 zero = _mm512_setzero_ps();
  for (int a = 0; a < NI; ++a) {
    const __m128 s =
        Reduce4(acc[a][0], NJ > 1 ? acc[a][NJ > 1 ? 1 : 0] : zero,
                NJ > 2 ? acc[a][NJ > 2 ? 2 : 0] : zero, NJ > 3 ? acc[a][NJ > 3 ? 3 : 0] : zero);
    if constexpr (NJ == 4) {
      _mm_storeu_ps(y + a * ldy, s);
    } else {
      _mm_mask_storeu_ps(y + a * ldy, static_cast<__mmask8>((1u << NJ) - 1), s);
    }
  }
}

// y[NI rows, NJ cols] tile: x rows i.., weight rows j...
template <typename L, int NI, int NJ>
LOOM_AVX512 void TileF32(const float* x, int64_t k, const typename L::Elem* w, float* y,
                         int64_t ldy) {
  __m512 acc[NI][NJ];
  for (int a = 0; a < NI; ++a)
    for (int b = 0; b < NJ; ++b) acc[a][b] = _mm512_setzero_ps();
  const int64_t kfull = k & ~int64_t{15};
  if constexpr (NI == 1) {
    // One row (decode) walks the weight rows one after another (the same products in the same
    // order per output): one sequential stream, which the hardware prefetcher follows at the
    // memory's speed, where 4 interleaved row streams with a software prefetch 2 KiB ahead in
    // each reached about half of it on a Zen 4 (docs/PERFORMANCE.md).
    for (int b = 0; b < NJ; ++b) {
      for (int64_t p = 0; p < kfull; p += 16) {
        acc[0][b] = _mm512_fmadd_ps(_mm512_loadu_ps(x + p), L::Load(w + b * k + p), acc[0][b]);
      }
    }
  }
  for (int64_t p = 0; NI > 1 && p < kfull; p += 16) {
    __m512 wv[NJ];
    // Several rows: each row tile asks for the next NJ weight rows (the same offset in each) into
    // L2 while it reads these (the first from memory, later ones from L1/L2). Short row streams (k
    // = 896: 56 lines) are more than the hardware prefetcher follows; a prefetch 2 KiB ahead in the
    // same rows into L1 (Emerald Rapids, 2026-11: 12 → 19.5 GB/s on the lm_head) left bf16 decode
    // at batch 4 / 8 at 74 / 108-114 tok/s on a Zen 4, against 140-146 / 169-177 this way
    // (docs/PERFORMANCE.md).
    for (int b = 0; b < NJ; ++b) {
      _mm_prefetch(reinterpret_cast<const char*>(w + (NJ + b) * k + p), _MM_HINT_T1);
    }
    for (int b = 0; b < NJ; ++b) wv[b] = L::Load(w + b * k + p);
    for (int a = 0; a < NI; ++a) {
      __m512 xv = _mm512_loadu_ps(x + a * k + p);
      for (int b = 0; b < NJ; ++b) acc[a][b] = _mm512_fmadd_ps(xv, wv[b], acc[a][b]);
    }
  }
  if (kfull < k) {
    const __mmask16 m = static_cast<__mmask16>((1u << (k - kfull)) - 1);
    __m512 wv[NJ];
    for (int b = 0; b < NJ; ++b) wv[b] = L::LoadMasked(w + b * k + kfull, m);
    for (int a = 0; a < NI; ++a) {
      __m512 xv = _mm512_maskz_loadu_ps(m, x + a * k + kfull);
      for (int b = 0; b < NJ; ++b) acc[a][b] = _mm512_fmadd_ps(xv, wv[b], acc[a][b]);
    }
  }
  StoreTile<NI, NJ>(acc, y, ldy);
}

template <typename L, int NJ>
LOOM_AVX512 void RowsF32(const float* x, int64_t n, int64_t k, const typename L::Elem* w, float* y,
                         int64_t ldy) {
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) TileF32<L, 4, NJ>(x + i * k, k, w, y + i * ldy, ldy);
  switch (n - i) {
    case 3: TileF32<L, 3, NJ>(x + i * k, k, w, y + i * ldy, ldy); break;
    case 2: TileF32<L, 2, NJ>(x + i * k, k, w, y + i * ldy, ldy); break;
    case 1: TileF32<L, 1, NJ>(x + i * k, k, w, y + i * ldy, ldy); break;
    default: break;
  }
}

template <typename L>
LOOM_AVX512 void KernelF32(const float* x, int64_t n, int64_t k, const void* wv, int64_t j0,
                           int64_t j1, float* y, int64_t ldy) {
  const auto* w = static_cast<const typename L::Elem*>(wv);
  int64_t j = j0;
  for (; j + 4 <= j1; j += 4) RowsF32<L, 4>(x, n, k, w + j * k, y + j, ldy);
  switch (j1 - j) {
    case 3: RowsF32<L, 3>(x, n, k, w + j * k, y + j, ldy); break;
    case 2: RowsF32<L, 2>(x, n, k, w + j * k, y + j, ldy); break;
    case 1: RowsF32<L, 1>(x, n, k, w + j * k, y + j, ldy); break;
    default: break;
  }
}

}  // namespace

LOOM_AVX512 void MatmulF32Avx512(DType wtype, const float* x, int64_t n, int64_t k, const void* w,
                                 int64_t j0, int64_t j1, float* y, int64_t ldy) {
  switch (wtype) {
    case DType::kF32:
      return KernelF32<Widen16F32>(x, n, k, w, j0, j1, y, ldy);
    case DType::kF16:
      return KernelF32<Widen16F16>(x, n, k, w, j0, j1, y, ldy);
    case DType::kBF16:
      return KernelF32<Widen16Bf16>(x, n, k, w, j0, j1, y, ldy);
  }
}

}  // namespace loom::cpu
