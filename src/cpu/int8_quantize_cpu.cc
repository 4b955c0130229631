// Per-row symmetric int8 quantization of activations (the prologue of every int8/int4 matmul): scalar reference, AVX-512, AVX2, dispatch.
#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "cpu/avx2_reduce.h"
#include "cpu/int8_cpu.h"
#include "tensor/dtype.h"

// GCC 12 reports the intrinsics' own _mm512_undefined_*() pass-through operands as
// uninitialized; they are fully overwritten.
#if !defined(__clang__)  // a gcc-only warning
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#pragma GCC diagnostic ignored "-Wuninitialized"

#define LOOM_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq")))
#define LOOM_AVX2 __attribute__((target("avx2,fma")))

namespace loom::cpu {

namespace {
// The row's scale from max|x|: false (and the row zeroed, s = max|x| or 0) for an all-zero row
// or a non-finite max; else s = max/127 and *inv = 127/max.
bool RowScale(float amax, int64_t k, int8_t* q, float* s, float* inv) {
  if (!(amax > 0) || !std::isfinite(amax)) {  // zero row (or an inf the sampler reports)
    std::fill(q, q + k, int8_t{0});
    *s = amax > 0 ? amax : 0.0f;
    return false;
  }
  *s = amax / 127.0f;
  *inv = 127.0f / amax;
  return true;
}

// One element: round half to even, clamp to ±127, NaN → 0.
inline int8_t QuantizeOne(float x, float inv) {
  const float v = std::nearbyint(x * inv);
  return std::isnan(v) ? int8_t{0} : static_cast<int8_t>(std::clamp(v, -127.0f, 127.0f));
}
}  // namespace

void QuantizeRowsInt8Scalar(const float* x, int64_t n, int64_t k, int8_t* xq, float* sx) {
  for (int64_t r = 0; r < n; ++r) {
    const float* xr = x + r * k;
    float amax = 0;
    for (int64_t i = 0; i < k; ++i) amax = std::max(amax, std::fabs(xr[i]));  // NaN skipped
    int8_t* q = xq + r * k;
    float inv = 0;
    if (!RowScale(amax, k, q, &sx[r], &inv)) continue;
    for (int64_t i = 0; i < k; ++i) q[i] = QuantizeOne(xr[i], inv);
  }
}

// The same operations on 16 lanes: max|x| (a NaN lane keeps the running max, as std::max),
// one rounded product x·inv, round half to even (the default MXCSR mode, as nearbyint), clamp,
// NaN → 0.
LOOM_AVX512 void QuantizeRowsInt8Avx512(const float* x, int64_t n, int64_t k, int8_t* xq, float* sx) {
  const __m512 abs_mask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
  for (int64_t r = 0; r < n; ++r) {
    const float* xr = x + r * k;
    __m512 vmax = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= k; i += 16) {
      const __m512 a = _mm512_and_ps(_mm512_loadu_ps(xr + i), abs_mask);
      vmax = _mm512_max_ps(a, vmax);  // NaN in a → vmax (the second operand)
    }
    float amax = _mm512_reduce_max_ps(vmax);
    for (; i < k; ++i) amax = std::max(amax, std::fabs(xr[i]));
    int8_t* q = xq + r * k;
    float inv = 0;
    if (!RowScale(amax, k, q, &sx[r], &inv)) continue;
    const __m512 vinv = _mm512_set1_ps(inv);
    const __m512 lo = _mm512_set1_ps(-127.0f), hi = _mm512_set1_ps(127.0f);
    for (i = 0; i + 16 <= k; i += 16) {
      const __m512 v = _mm512_roundscale_ps(_mm512_mul_ps(_mm512_loadu_ps(xr + i), vinv),
                                            _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
      const __m512 c = _mm512_mask_mov_ps(_mm512_min_ps(_mm512_max_ps(v, lo), hi), nan, _mm512_setzero_ps());
      _mm_storeu_si128(reinterpret_cast<__m128i*>(q + i), _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(c)));
    }
    for (; i < k; ++i) q[i] = QuantizeOne(xr[i], inv);
  }
}

namespace {
// Eight elements: x·inv rounded half to even (vroundps), clamped to ±127, NaN → 0, as int32.
LOOM_AVX2 inline __m256i Eight(const float* x, __m256 inv) {
  const __m256 v = _mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(x), inv),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m256 c = _mm256_min_ps(_mm256_max_ps(v, _mm256_set1_ps(-127.0f)), _mm256_set1_ps(127.0f));
  return _mm256_cvtps_epi32(_mm256_andnot_ps(_mm256_cmp_ps(v, v, _CMP_UNORD_Q), c));
}
}  // namespace

// The AVX-512 quantizer's steps on 8 lanes, 32 elements per store: max|x| (vmaxps keeps the
// running max for a NaN lane), x·inv rounded half to even (vroundps), clamp, NaN → 0, then the
// int32 lanes packed to bytes (already within ±127, so the packs never saturate).
LOOM_AVX2 void QuantizeRowsInt8Avx2(const float* x, int64_t n, int64_t k, int8_t* xq, float* sx) {
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);  // undo packs' lane split
  for (int64_t r = 0; r < n; ++r) {
    const float* xr = x + r * k;
    __m256 vmax = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= k; i += 8) vmax = _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(xr + i), abs_mask), vmax);
    float amax = Max8(vmax);  // lanes ≥ 0, no NaN: any order gives the same max
    for (; i < k; ++i) amax = std::max(amax, std::fabs(xr[i]));
    int8_t* q = xq + r * k;
    float inv = 0;
    if (!RowScale(amax, k, q, &sx[r], &inv)) continue;
    const __m256 vinv = _mm256_set1_ps(inv);
    for (i = 0; i + 32 <= k; i += 32) {
      const __m256i w01 = _mm256_packs_epi32(Eight(xr + i, vinv), Eight(xr + i + 8, vinv));
      const __m256i w23 = _mm256_packs_epi32(Eight(xr + i + 16, vinv), Eight(xr + i + 24, vinv));
      const __m256i b = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(w01, w23), order);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + i), b);
    }
    for (; i < k; ++i) q[i] = QuantizeOne(xr[i], inv);
  }
}

void QuantizeRowsInt8(const float* x, int64_t n, int64_t k, int8_t* xq, float* sx) {
  if (ActiveIsa() >= Isa::kAvx512) return QuantizeRowsInt8Avx512(x, n, k, xq, sx);
  if (ActiveIsa() >= Isa::kAvx2) return QuantizeRowsInt8Avx2(x, n, k, xq, sx);
  QuantizeRowsInt8Scalar(x, n, k, xq, sx);
}

void RoundToF16Scalar(const float* x, int64_t n, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] = F16ToF32(F32ToF16(x[i]));
}

__attribute__((target("avx2,f16c"))) void RoundToF16F16c(const float* x, int64_t n, float* y) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT);
    _mm256_storeu_ps(y + i, _mm256_cvtph_ps(h));
  }
  RoundToF16Scalar(x + i, n - i, y + i);
}

void RoundToF16(const float* x, int64_t n, float* y) {
  if (ActiveIsa() >= Isa::kAvx2) {
    RoundToF16F16c(x, n, y);
  } else {
    RoundToF16Scalar(x, n, y);
  }
}

}  // namespace loom::cpu
