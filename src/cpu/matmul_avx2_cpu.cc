// AVX2+FMA matmul kernel (f32 activations): 4×4 register tiles of 8-lane accumulators.
#include <immintrin.h>

#include "cpu/matmul_cpu.h"

#define LOOM_AVX2 __attribute__((target("avx2,fma,f16c")))

namespace loom::cpu {

namespace {

struct LoadF32 {
  using T = float;
  LOOM_AVX2 static __m256 Full(const float* p) { return _mm256_loadu_ps(p); }
  static float One(const float* p) { return *p; }
};
struct LoadBf16 {
  using T = uint16_t;
  LOOM_AVX2 static __m256 Full(const uint16_t* p) {
    __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(v), 16));
  }
  static float One(const uint16_t* p) { return Bf16ToF32(*p); }
};
struct LoadF16 {
  using T = uint16_t;
  LOOM_AVX2 static __m256 Full(const uint16_t* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static float One(const uint16_t* p) { return F16ToF32(*p); }
};

LOOM_AVX2 inline float Sum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// y[a][b] = Σ_p x[a][p]·w[b][p] for NI activation rows × NJ weight rows; each output sums its own
// 8 lanes in p order, then the lanes, then the tail, whatever the tile shape (batch invariance).
// PF (the one-row decode tile): prefetch the next tile's weight rows, NJ·k elements ahead. Decode
// streams every weight once from DRAM, NJ rows of only k elements at a time (896 bf16 = 28 cache
// lines on the bench model), too short for the hardware prefetcher to ramp up. On a Zen 3 (AVX2)
// VM the lm_head (151936 × 896 bf16, n = 1, 2 threads) went from 9.6-10.2 to 12.6 GB/s
// (loom_kernel_bench, median of 5, interleaved); two tiles ahead measured the same; 2 KiB ahead
// within the row (as the AVX-512 kernel) and 3 × 4 tiles measured slower.
template <typename L, int NI, int NJ, bool PF>
LOOM_AVX2 void Tile(const float* x, int64_t k, const typename L::T* w, float* y, int64_t ldy) {
  constexpr int64_t kLine = 64 / sizeof(typename L::T);  // elements per cache line
  __m256 acc[NI][NJ];
  for (int a = 0; a < NI; ++a)
    for (int b = 0; b < NJ; ++b) acc[a][b] = _mm256_setzero_ps();
  const int64_t kfull = k & ~int64_t{7};
  for (int64_t p = 0; p < kfull; p += 8) {
    if (PF && (p & (kLine - 1)) == 0) {
      for (int b = 0; b < NJ; ++b)
        _mm_prefetch(reinterpret_cast<const char*>(w + (b + NJ) * k + p), _MM_HINT_T0);
    }
    __m256 wv[NJ];
    for (int b = 0; b < NJ; ++b) wv[b] = L::Full(w + b * k + p);
    for (int a = 0; a < NI; ++a) {
      __m256 xv = _mm256_loadu_ps(x + a * k + p);
      for (int b = 0; b < NJ; ++b) acc[a][b] = _mm256_fmadd_ps(xv, wv[b], acc[a][b]);
    }
  }
  for (int a = 0; a < NI; ++a) {
    for (int b = 0; b < NJ; ++b) {
      float s = Sum8(acc[a][b]);
      for (int64_t p = kfull; p < k; ++p) s += x[a * k + p] * L::One(w + b * k + p);
      y[a * ldy + b] = s;
    }
  }
}

template <typename L, int NJ>
LOOM_AVX2 void Rows(const float* x, int64_t n, int64_t k, const typename L::T* w, float* y,
                    int64_t ldy) {
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) Tile<L, 4, NJ, false>(x + i * k, k, w, y + i * ldy, ldy);
  switch (n - i) {
    case 3: Tile<L, 3, NJ, false>(x + i * k, k, w, y + i * ldy, ldy); break;
    case 2: Tile<L, 2, NJ, false>(x + i * k, k, w, y + i * ldy, ldy); break;
    case 1: Tile<L, 1, NJ, true>(x + i * k, k, w, y + i * ldy, ldy); break;
    default: break;
  }
}

template <typename L>
LOOM_AVX2 void Kernel(const float* x, int64_t n, int64_t k, const void* wv, int64_t j0, int64_t j1,
                      float* y, int64_t ldy) {
  const auto* w = static_cast<const typename L::T*>(wv);
  int64_t j = j0;
  for (; j + 4 <= j1; j += 4) Rows<L, 4>(x, n, k, w + j * k, y + j, ldy);
  switch (j1 - j) {
    case 3: Rows<L, 3>(x, n, k, w + j * k, y + j, ldy); break;
    case 2: Rows<L, 2>(x, n, k, w + j * k, y + j, ldy); break;
    case 1: Rows<L, 1>(x, n, k, w + j * k, y + j, ldy); break;
    default: break;
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
