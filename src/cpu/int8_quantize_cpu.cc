// Per-row symmetric int8 quantization of activations (the prologue of every int8/int4 matmul): scalar reference, AVX-512, dispatch.
#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "cpu/int8_cpu.h"

// GCC 12 reports the intrinsics' own _mm512_undefined_*() pass-through operands as
// uninitialized; they are fully overwritten.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#define LOOM_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq")))

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

void QuantizeRowsInt8(const float* x, int64_t n, int64_t k, int8_t* xq, float* sx) {
  if (ActiveIsa() >= Isa::kAvx512) return QuantizeRowsInt8Avx512(x, n, k, xq, sx);
  QuantizeRowsInt8Scalar(x, n, k, xq, sx);
}

}  // namespace loom::cpu
