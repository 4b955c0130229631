// CPU kernels for temperature sampling over a logits row: the unnormalised probabilities with their sum, and the draw by cumulative mass.
#pragma once

#include <cstdint>

#include "cpu/cpu_features.h"

namespace loom::cpu {

// p[i] = exp(x[i]·s − mx) for x [n], in float (libm's expf at scalar; glibc libmvec's 8-lane
// expf, within 4 ulp, at avx2 and above, where the compiler may also fuse the multiply and the
// subtraction: levels may differ in p's last bits); returns Σ p[i] in double, element i added
// into lane i % 4 in index order, then (lane 0 + lane 1) + (lane 2 + lane 3), at every level.
double ExpScaled(Isa isa, const float* x, int64_t n, float s, float mx, float* p);
double ExpScaledScalar(const float* x, int64_t n, float s, float mx, float* p);
double ExpScaledAvx2(const float* x, int64_t n, float s, float mx, float* p);

// The token a uniform draw u ∈ [0, Σ p) picks, p [n] ≥ 0 in index order: blocks of kDrawBlock
// elements, each block's mass summed as ExpScaled sums (4 lanes, then the lanes); the first
// block whose cumulative mass exceeds u is walked element by element from the mass before it
// (acc += p[i] in double) to the first i with u < acc. Rounding can leave u past a block's
// walk: the walk then goes on into the next blocks, and past the end it returns the last i with
// p[i] > 0 (−1 if none) — never a token of probability 0. Every level gives the same index.
inline constexpr int64_t kDrawBlock = 64;
int64_t DrawByMass(Isa isa, const float* p, int64_t n, double u);
int64_t DrawByMassScalar(const float* p, int64_t n, double u);
int64_t DrawByMassAvx2(const float* p, int64_t n, double u);

}  // namespace loom::cpu
