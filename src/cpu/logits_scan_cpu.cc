// Kernels over a logits row, scalar and AVX2: the greedy scan (max and bad flags, then the first index of the max) and Σ exp(x − max).
#include "cpu/logits_scan_cpu.h"

#include <immintrin.h>

#include <cmath>

#include "cpu/avx2_reduce.h"

#define LOOM_AVX2 __attribute__((target("avx2,fma")))

extern "C" LOOM_AVX2 __m256d _ZGVdN4v_exp(__m256d x);  // glibc libmvec, AVX2

namespace loom::cpu {

LogitsScan ScanLogitsScalar(const float* x, int64_t n) {
  LogitsScan out;
  float best = -INFINITY;  // the running maximum in a register (reading x[best] back each step
                           // made a load-compare-cmov chain: ~4 ns per logit)
  for (int64_t i = 0; i < n; ++i) {
    const float l = x[i];
    if (std::isnan(l) || l == INFINITY) return {-1, i};
    if (l > best) {
      best = l;
      out.best = i;
    }
  }
  return out;
}

LOOM_AVX2 LogitsScan ScanLogitsAvx2(const float* x, int64_t n) {
  const int64_t full = n / 8 * 8;
  const __m256 inf = _mm256_set1_ps(INFINITY);
  __m256 vmax = _mm256_set1_ps(-INFINITY);
  __m256 bad = _mm256_setzero_ps();
  for (int64_t i = 0; i < full; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    bad = _mm256_or_ps(bad, _mm256_or_ps(_mm256_cmp_ps(v, v, _CMP_UNORD_Q),
                                         _mm256_cmp_ps(v, inf, _CMP_EQ_OQ)));
    vmax = _mm256_max_ps(vmax, v);  // NaN lanes are flagged in `bad`, which falls back below
  }
  float m = -INFINITY;
  for (int64_t i = full; i < n; ++i) {
    if (std::isnan(x[i]) || x[i] == INFINITY) return ScanLogitsScalar(x, n);
    if (x[i] > m) m = x[i];
  }
  // Anything non-finite above: the scalar scan names the first such index.
  if (_mm256_movemask_ps(bad) != 0) return ScanLogitsScalar(x, n);
  const float vm = Max8(vmax);
  if (vm > m) m = vm;
  if (m == -INFINITY) return {};
  const __m256 mv = _mm256_set1_ps(m);
  for (int64_t i = 0; i < full; i += 8) {
    const int hit = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(x + i), mv, _CMP_EQ_OQ));
    if (hit != 0) return {i + __builtin_ctz(static_cast<unsigned>(hit)), -1};
  }
  for (int64_t i = full; i < n; ++i) {
    if (x[i] == m) return {i, -1};
  }
  return {};  // unreachable: m is one of the x[i]
}

double SumExpShiftedScalar(const float* x, int64_t n, float mx) {
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += std::exp(static_cast<double>(x[i] - mx));
  return sum;
}

// libm's scalar exp was ~5.6 ns per logit: 0.85 ms per 151936-logit row, serial on the engine
// thread for every sequence that asks for logprobs.
LOOM_AVX2 double SumExpShiftedAvx2(const float* x, int64_t n, float mx) {
  const int64_t full = n / 4 * 4;
  const __m128 m = _mm_set1_ps(mx);
  __m256d acc = _mm256_setzero_pd();
  for (int64_t i = 0; i < full; i += 4) {
    const __m128 d = _mm_sub_ps(_mm_loadu_ps(x + i), m);  // float, as the scalar level
    acc = _mm256_add_pd(acc, _ZGVdN4v_exp(_mm256_cvtps_pd(d)));
  }
  alignas(32) double lanes[4];
  _mm256_store_pd(lanes, acc);
  double sum = (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
  for (int64_t i = full; i < n; ++i) sum += std::exp(static_cast<double>(x[i] - mx));
  return sum;
}

double SumExpShifted(Isa isa, const float* x, int64_t n, float mx) {
  if (isa == Isa::kScalar) return SumExpShiftedScalar(x, n, mx);
  return SumExpShiftedAvx2(x, n, mx);
}

LogitsScan ScanLogits(Isa isa, const float* x, int64_t n) {
  if (isa == Isa::kScalar) return ScanLogitsScalar(x, n);
  return ScanLogitsAvx2(x, n);  // every level above scalar has AVX2
}

}  // namespace loom::cpu
