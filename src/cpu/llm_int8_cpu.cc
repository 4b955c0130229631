// LLM.int8's activation row after the f16 rounding (outliers out, row max, xq = rint(h · inv)): scalar reference and AVX2, the same bits.
#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "cpu/avx2_reduce.h"
#include "cpu/int8_cpu.h"

#define LOOM_AVX2 __attribute__((target("avx2,fma")))

namespace loom::cpu {

namespace {
// Elements [i0, i1) of h: outliers zeroed and their indices appended; returns the rest's max |h|.
float ScanRange(float* h, int64_t i0, int64_t i1, float threshold, std::vector<int64_t>* outliers) {
  float rowmax = 0;
  for (int64_t i = i0; i < i1; ++i) {
    if (threshold > 0 && std::fabs(h[i]) >= threshold) {
      outliers->push_back(i);
      h[i] = 0;
    }
    rowmax = std::max(rowmax, std::fabs(h[i]));  // NaN skipped
  }
  return rowmax;
}
}  // namespace

float LlmInt8OutliersAndMaxScalar(float* h, int64_t k, float threshold,
                                  std::vector<int64_t>* outliers) {
  return ScanRange(h, 0, k, threshold, outliers);
}

void LlmInt8QuantizeScalar(const float* h, int64_t k, float inv, int8_t* xq) {
  for (int64_t i = 0; i < k; ++i) {
    const float r = std::nearbyint(h[i] * inv);
    xq[i] = (r >= -127.0f && r <= 127.0f) ? static_cast<int8_t>(r) : int8_t{0};
  }
}

// 8 lanes at a time: a group with an outlier lane goes through the scalar steps (outliers are
// rare: bitsandbytes' threshold 6 marks a few elements per prompt); vmaxps keeps the running max
// for a NaN lane, as std::max; the max of non-negative lanes is the same in any order.
LOOM_AVX2 float LlmInt8OutliersAndMaxAvx2(float* h, int64_t k, float threshold,
                                          std::vector<int64_t>* outliers) {
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  const __m256 thr = _mm256_set1_ps(threshold);
  __m256 vmax = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= k; i += 8) {
    __m256 a = _mm256_and_ps(_mm256_loadu_ps(h + i), abs_mask);
    if (threshold > 0 && _mm256_movemask_ps(_mm256_cmp_ps(a, thr, _CMP_GE_OQ)) != 0) {
      ScanRange(h, i, i + 8, threshold, outliers);
      a = _mm256_and_ps(_mm256_loadu_ps(h + i), abs_mask);
    }
    vmax = _mm256_max_ps(a, vmax);
  }
  return std::max(Max8(vmax), ScanRange(h, i, k, threshold, outliers));
}

// rint(h · inv) in 8 lanes (vroundps: round half to even, as nearbyint), kept where it lies in
// ±127 (false for NaN), else 0; packed to bytes 32 at a time.
LOOM_AVX2 void LlmInt8QuantizeAvx2(const float* h, int64_t k, float inv, int8_t* xq) {
  const __m256 vinv = _mm256_set1_ps(inv);
  const __m256 lo = _mm256_set1_ps(-127.0f), hi = _mm256_set1_ps(127.0f);
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);  // undo packs' lane split
  auto eight = [&](const float* p) LOOM_AVX2 {
    const __m256 v = _mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(p), vinv),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m256 in = _mm256_and_ps(_mm256_cmp_ps(v, lo, _CMP_GE_OQ), _mm256_cmp_ps(v, hi, _CMP_LE_OQ));
    return _mm256_cvtps_epi32(_mm256_and_ps(in, v));
  };
  int64_t i = 0;
  for (; i + 32 <= k; i += 32) {
    const __m256i w01 = _mm256_packs_epi32(eight(h + i), eight(h + i + 8));
    const __m256i w23 = _mm256_packs_epi32(eight(h + i + 16), eight(h + i + 24));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(xq + i),
                        _mm256_permutevar8x32_epi32(_mm256_packs_epi16(w01, w23), order));
  }
  LlmInt8QuantizeScalar(h + i, k - i, inv, xq + i);
}

float LlmInt8OutliersAndMax(float* h, int64_t k, float threshold, std::vector<int64_t>* outliers) {
  if (ActiveIsa() >= Isa::kAvx2) return LlmInt8OutliersAndMaxAvx2(h, k, threshold, outliers);
  return LlmInt8OutliersAndMaxScalar(h, k, threshold, outliers);
}

void LlmInt8Quantize(const float* h, int64_t k, float inv, int8_t* xq) {
  if (ActiveIsa() >= Isa::kAvx2) return LlmInt8QuantizeAvx2(h, k, inv, xq);
  LlmInt8QuantizeScalar(h, k, inv, xq);
}

}  // namespace loom::cpu
