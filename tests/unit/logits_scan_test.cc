// The logits-row kernels (cpu/logits_scan_cpu.h) at every level: the greedy scan against the sampler's old loop (same first maximum, same first NaN/+inf), Σ exp against a long double sum.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "cpu/cpu_features.h"
#include "cpu/logits_scan_cpu.h"

namespace loom::cpu {
namespace {

// The loop Sampler::Sample ran before the scan: x[best] read back at every step.
LogitsScan Reference(const std::vector<float>& x) {
  LogitsScan out;
  for (size_t i = 0; i < x.size(); ++i) {
    const float l = x[i];
    if (std::isnan(l) || l == INFINITY) return {-1, static_cast<int64_t>(i)};
    if (l > -INFINITY && (out.best < 0 || l > x[static_cast<size_t>(out.best)])) {
      out.best = static_cast<int64_t>(i);
    }
  }
  return out;
}

void ExpectAllLevels(const std::vector<float>& x, const std::string& what) {
  const LogitsScan want = Reference(x);
  const auto n = static_cast<int64_t>(x.size());
  const LogitsScan scalar = ScanLogitsScalar(x.data(), n);
  EXPECT_EQ(scalar.best, want.best) << what << " (scalar)";
  EXPECT_EQ(scalar.bad, want.bad) << what << " (scalar)";
  if (DetectIsa() >= Isa::kAvx2) {
    const LogitsScan avx2 = ScanLogitsAvx2(x.data(), n);
    EXPECT_EQ(avx2.best, want.best) << what << " (avx2)";
    EXPECT_EQ(avx2.bad, want.bad) << what << " (avx2)";
  }
}

TEST(LogitsScan, EveryLevelFindsTheFirstMaximumAndTheFirstNonFinite) {
  std::mt19937 rng(7);
  std::normal_distribution<float> d(0.0f, 3.0f);
  std::uniform_int_distribution<int> coarse(-3, 3);  // many ties
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (int64_t n : {0, 1, 5, 8, 9, 15, 16, 17, 31, 40, 151936}) {
    for (int trial = 0; trial < 6; ++trial) {
      std::vector<float> x(static_cast<size_t>(n));
      for (auto& v : x) v = trial % 2 ? static_cast<float>(coarse(rng)) : d(rng);
      const std::string what = "n=" + std::to_string(n) + " trial " + std::to_string(trial);
      ExpectAllLevels(x, what);
      if (n == 0) continue;
      std::uniform_int_distribution<int64_t> pos(0, n - 1);
      // Ties at the maximum: the first one wins (also in the tail past the last full vector).
      std::vector<float> tied = x;
      const float top = 100.0f;
      const int64_t a = pos(rng), b = pos(rng);
      tied[static_cast<size_t>(a)] = top;
      tied[static_cast<size_t>(b)] = top;
      ExpectAllLevels(tied, what + " tie");
      // −0 and +0 as the maximum: equal, the first wins.
      std::vector<float> zeros(static_cast<size_t>(n), -1.0f);
      zeros[static_cast<size_t>(a)] = -0.0f;
      zeros[static_cast<size_t>(b)] = 0.0f;
      ExpectAllLevels(zeros, what + " signed zeros");
      // −inf entries are never chosen; all −inf gives none.
      std::vector<float> neg(static_cast<size_t>(n), -INFINITY);
      ExpectAllLevels(neg, what + " all -inf");
      neg[static_cast<size_t>(b)] = -1e30f;
      ExpectAllLevels(neg, what + " one finite");
      // NaN and +inf: the first of them, wherever the maximum is.
      for (float poison : {nan, INFINITY}) {
        std::vector<float> bad = tied;
        bad[static_cast<size_t>(b)] = poison;
        if (n > 1) bad[static_cast<size_t>(n - 1)] = poison;
        ExpectAllLevels(bad, what + (std::isnan(poison) ? " NaN" : " +inf"));
      }
    }
  }
}

TEST(LogitsScan, ScanLogitsDispatchesToTheSameResult) {
  std::vector<float> x = {1.0f, 3.0f, -INFINITY, 3.0f, 2.0f, 0.5f, 3.0f, 1.0f, 2.5f, 3.0f};
  for (Isa isa : {Isa::kScalar, DetectIsa()}) {
    const LogitsScan s = ScanLogits(isa, x.data(), static_cast<int64_t>(x.size()));
    EXPECT_EQ(s.best, 1);
    EXPECT_EQ(s.bad, -1);
  }
}

TEST(LogitsScan, SumExpShiftedMatchesALongDoubleSumAtEveryLevel) {
  std::mt19937 rng(9);
  std::normal_distribution<float> d(0.0f, 4.0f);
  for (int64_t n : {1, 3, 4, 7, 9, 151936}) {
    std::vector<float> x(static_cast<size_t>(n));
    for (auto& v : x) v = d(rng);
    if (n > 2) x[1] = -INFINITY;  // a masked token adds exp(−inf) = 0
    float mx = -INFINITY;
    for (float v : x) mx = std::max(mx, v);
    long double want = 0;
    for (float v : x) want += std::exp(static_cast<long double>(v - mx));
    const double tol = 1e-13 * static_cast<double>(want);  // a few ulp per term, summed
    EXPECT_NEAR(SumExpShiftedScalar(x.data(), n, mx), static_cast<double>(want), tol) << n;
    if (DetectIsa() >= Isa::kAvx2) {
      EXPECT_NEAR(SumExpShiftedAvx2(x.data(), n, mx), static_cast<double>(want), tol) << n;
    }
    EXPECT_NEAR(SumExpShifted(DetectIsa(), x.data(), n, mx), static_cast<double>(want), tol) << n;
  }
}

}  // namespace
}  // namespace loom::cpu
