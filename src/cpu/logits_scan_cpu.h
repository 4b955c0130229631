// CPU kernels for the greedy scan of a logits row: the first non-finite-above logit, else the first maximum.
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

}  // namespace loom::cpu
