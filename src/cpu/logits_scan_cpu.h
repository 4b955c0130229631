// CPU kernels over a logits row: the greedy scan (the first NaN/+inf, else the first maximum) and log-softmax's sum of exponentials.
#pragma once

#include <cstdint>

#include "cpu/cpu_features.h"

namespace loom::cpu {

// x: [n] logits. bad = the first i with x[i] NaN or +inf (−1: none); when there is none, best =
// the first i with the largest x[i] above −inf (−1: every x[i] is −inf, or n = 0), else best = −1.
// Every level returns the same indices: +0 and −0 compare equal, so the first of them wins.
struct LogitsScan {
  int64_t best = -1;
  int64_t bad = -1;
};
LogitsScan ScanLogits(Isa isa, const float* x, int64_t n);
LogitsScan ScanLogitsScalar(const float* x, int64_t n);
LogitsScan ScanLogitsAvx2(const float* x, int64_t n);

// Σ_i exp(double(x[i] − mx)) over x [n] (the subtraction in float, the exp and the sum in double,
// in index order within each of 4 lanes at avx2, then the lanes): log-softmax's normaliser.
// Levels may differ in the last bits of the double (libmvec's exp is within 4 ulp).
double SumExpShifted(Isa isa, const float* x, int64_t n, float mx);
double SumExpShiftedScalar(const float* x, int64_t n, float mx);
double SumExpShiftedAvx2(const float* x, int64_t n, float mx);

}  // namespace loom::cpu
