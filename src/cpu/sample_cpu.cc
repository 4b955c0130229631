// Temperature sampling kernels, scalar and AVX2: exp(x·s − mx) over a row with its 4-lane double sum, and the draw by block masses.
#include "cpu/sample_cpu.h"

#include <immintrin.h>

#include <cmath>

#define LOOM_AVX2 __attribute__((target("avx2,fma")))

extern "C" LOOM_AVX2 __m256 _ZGVdN8v_expf(__m256 x);  // glibc libmvec, AVX2

namespace loom::cpu {

namespace {
// 4 double lanes → one sum, in the order the header states.
inline double Lanes(const double* l) { return (l[0] + l[1]) + (l[2] + l[3]); }

// Element i of p goes into lane i % 4 (i counted from p's start, a multiple of 4 at every call).
inline void AddScalarLanes(const float* p, int64_t n, double* l) {
  for (int64_t i = 0; i < n; ++i) l[i % 4] += static_cast<double>(p[i]);
}

// The walk inside the blocks from `start`, acc = the mass before it.
int64_t Walk(const float* p, int64_t start, int64_t n, double acc, double u) {
  for (int64_t i = start; i < n; ++i) {
    acc += static_cast<double>(p[i]);
    if (u < acc) return i;
  }
  for (int64_t i = n - 1; i >= 0; --i) {
    if (p[i] > 0) return i;
  }
  return -1;
}

// A block of mass m starting at b: the drawn index if u falls in it (its walk), else kNext
// with cum advanced past it.
constexpr int64_t kNext = -2;
inline int64_t Block(const float* p, int64_t b, int64_t n, double m, double u, double* cum) {
  const double next = *cum + m;
  if (u < next) return Walk(p, b, n, *cum, u);
  *cum = next;
  return kNext;
}
}  // namespace

double ExpScaledScalar(const float* x, int64_t n, float s, float mx, float* p) {
  for (int64_t i = 0; i < n; ++i) p[i] = std::exp(x[i] * s - mx);
  double l[4] = {0, 0, 0, 0};
  AddScalarLanes(p, n, l);
  return Lanes(l);
}

LOOM_AVX2 inline __m256 Exp8(const float* x, __m256 s, __m256 mx) {
  return _ZGVdN8v_expf(_mm256_sub_ps(_mm256_mul_ps(_mm256_loadu_ps(x), s), mx));
}

// libm's expf is ~5 ns a call: 0.75 ms per 151936-logit row, serial on the engine thread for
// every sampled sequence.
LOOM_AVX2 double ExpScaledAvx2(const float* x, int64_t n, float s, float mx, float* p) {
  const __m256 vs = _mm256_set1_ps(s), vm = _mm256_set1_ps(mx);
  __m256d acc = _mm256_setzero_pd();  // lane k: elements k, k + 4, k + 8, ... in index order
  const int64_t full = n / 8 * 8;
  for (int64_t i = 0; i < full; i += 8) {
    const __m256 e = Exp8(x + i, vs, vm);
    _mm256_storeu_ps(p + i, e);
    acc = _mm256_add_pd(acc, _mm256_cvtps_pd(_mm256_castps256_ps128(e)));
    acc = _mm256_add_pd(acc, _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1)));
  }
  alignas(32) double l[4];
  _mm256_store_pd(l, acc);
  if (full < n) {  // the tail through the same vector exp, from a padded copy
    alignas(32) float buf[8] = {0, 0, 0, 0, 0, 0, 0, 0}, e[8];
    for (int64_t i = full; i < n; ++i) buf[i - full] = x[i];
    _mm256_store_ps(e, Exp8(buf, vs, vm));
    for (int64_t i = full; i < n; ++i) p[i] = e[i - full];
    AddScalarLanes(p + full, n - full, l);  // full is a multiple of 4: the same lanes
  }
  return Lanes(l);
}

double ExpScaled(Isa isa, const float* x, int64_t n, float s, float mx, float* p) {
  if (isa == Isa::kScalar) return ExpScaledScalar(x, n, s, mx, p);
  return ExpScaledAvx2(x, n, s, mx, p);  // every level above scalar has AVX2
}

int64_t DrawByMassScalar(const float* p, int64_t n, double u) {
  double cum = 0;
  for (int64_t b = 0; b < n; b += kDrawBlock) {
    const int64_t e = b + kDrawBlock < n ? b + kDrawBlock : n;
    double l[4] = {0, 0, 0, 0};
    AddScalarLanes(p + b, e - b, l);
    if (const int64_t i = Block(p, b, n, Lanes(l), u, &cum); i != kNext) return i;
  }
  return Walk(p, n, n, cum, u);
}

// The scalar walk is a chain of dependent double adds (~4 cycles each): ~0.2 ms to the middle
// of a 151936-token row. Block masses take 16 independent quads per block.
LOOM_AVX2 int64_t DrawByMassAvx2(const float* p, int64_t n, double u) {
  double cum = 0;
  int64_t b = 0;
  for (; b + kDrawBlock <= n; b += kDrawBlock) {
    __m256d acc = _mm256_setzero_pd();
    for (int64_t i = b; i < b + kDrawBlock; i += 4) {
      acc = _mm256_add_pd(acc, _mm256_cvtps_pd(_mm_loadu_ps(p + i)));
    }
    alignas(32) double l[4];
    _mm256_store_pd(l, acc);
    if (const int64_t i = Block(p, b, n, Lanes(l), u, &cum); i != kNext) return i;
  }
  if (b < n) {
    double l[4] = {0, 0, 0, 0};
    AddScalarLanes(p + b, n - b, l);
    if (const int64_t i = Block(p, b, n, Lanes(l), u, &cum); i != kNext) return i;
  }
  return Walk(p, n, n, cum, u);
}

int64_t DrawByMass(Isa isa, const float* p, int64_t n, double u) {
  if (isa == Isa::kScalar) return DrawByMassScalar(p, n, u);
  return DrawByMassAvx2(p, n, u);
}

}  // namespace loom::cpu
