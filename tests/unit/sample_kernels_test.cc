// The temperature-sampling kernels (cpu/sample_cpu.h) at every level: exp(x·s − mx) against a double reference, the 4-lane sum against its definition, the draw against a sequential walk.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "cpu/cpu_features.h"
#include "cpu/sample_cpu.h"
#include "kernel_test_util.h"

namespace loom::cpu {
namespace {

std::vector<float> Logits(size_t n, uint32_t seed) {
  std::vector<float> v = RandomNonZeroMean(n, seed);
  for (auto& x : v) x *= 3.0f;  // N(0.9, 3): a logits row's spread
  return v;
}

// Σ p as the header defines it: element i into lane i % 4 in index order, then the lanes.
double LaneSum(const float* p, int64_t n) {
  double l[4] = {0, 0, 0, 0};
  for (int64_t i = 0; i < n; ++i) l[i % 4] += static_cast<double>(p[i]);
  return (l[0] + l[1]) + (l[2] + l[3]);
}

// Lengths around the 8-lane vectors and the 64-element blocks, and a vocabulary's.
const int64_t kLengths[] = {1, 3, 7, 8, 9, 63, 64, 65, 200, 151936};

TEST(SampleKernels, ExpScaledIsExpWithinUlpsAndSumsItsLanes) {
  for (int64_t n : kLengths) {
    auto x = Logits(static_cast<size_t>(n), static_cast<uint32_t>(n));
    if (n > 1) x[static_cast<size_t>(n / 2)] = -INFINITY;  // a masked token: probability 0
    float mx = -INFINITY;
    const float s = 1.25f;
    for (float v : x) mx = std::max(mx, v * s);
    std::vector<float> p(static_cast<size_t>(n), -1.0f);
    for (Isa isa : {Isa::kScalar, Isa::kAvx2}) {
      if (isa > DetectIsa()) continue;
      SCOPED_TRACE(std::string(IsaName(isa)) + " n " + std::to_string(n));
      const double sum = ExpScaled(isa, x.data(), n, s, mx, p.data());
      for (int64_t i = 0; i < n; ++i) {
        const double want = std::exp(static_cast<double>(x[static_cast<size_t>(i)]) * s - mx);
        // float rounding of x·s (|x·s| < 30: ≤ 2⁻²⁴·30 ≈ 1.8e-6 in the exponent) and of the
        // difference, plus libmvec's 4 ulp
        ASSERT_NEAR(p[static_cast<size_t>(i)], want, 2.5e-6 * want + 1e-30) << i;
      }
      if (n > 1) {
        EXPECT_EQ(p[static_cast<size_t>(n / 2)], 0.0f);
      }
      EXPECT_EQ(sum, LaneSum(p.data(), n));  // exactly the stated order
    }
  }
}

// u swept over [0, Σ p): each level picks the index a plain walk (acc += p[i], first u < acc)
// picks wherever the block masses agree with that walk, and never a zero-probability token.
TEST(SampleKernels, DrawByMassMatchesTheWalkAndSkipsZeroProbability) {
  for (int64_t n : kLengths) {
    auto x = Logits(static_cast<size_t>(n), 100 + static_cast<uint32_t>(n));
    std::vector<float> p(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) p[static_cast<size_t>(i)] = std::exp(x[static_cast<size_t>(i)] - 10.0f);
    for (int64_t i = 0; i < n; i += 5) p[static_cast<size_t>(i)] = 0;  // masked tokens
    if (n > 1) p[static_cast<size_t>(n - 1)] = 0;                         // the last one too
    const double total = LaneSum(p.data(), n);
    std::mt19937_64 rng(7);
    std::uniform_real_distribution<double> uni(0.0, 1.0);
    int checked = 0;
    for (int k = 0; k < 400; ++k) {
      const double u = (k == 0 ? 0.0 : k == 1 ? std::nextafter(1.0, 0.0) : uni(rng)) * total;
      double acc = 0;
      int64_t walk = -1;
      for (int64_t i = 0; i < n && walk < 0; ++i) {
        acc += static_cast<double>(p[static_cast<size_t>(i)]);
        if (u < acc) walk = i;
      }
      const int64_t scalar = DrawByMassScalar(p.data(), n, u);
      if (DetectIsa() >= Isa::kAvx2) {
        ASSERT_EQ(DrawByMassAvx2(p.data(), n, u), scalar) << "u " << u;
      }
      if (total == 0) {  // n = 1: its one token is masked
        ASSERT_EQ(scalar, -1);
        ++checked;
        continue;
      }
      ASSERT_GE(scalar, 0);
      ASSERT_GT(p[static_cast<size_t>(scalar)], 0.0f) << "a zero-probability token drawn, u " << u;
      // The walks agree up to the rounding of the block sums: equal, or a neighbour at a
      // boundary that rounding moved.
      if (walk >= 0 && walk != scalar) {
        ASSERT_LT(std::abs(walk - scalar), 6) << "u " << u;
      } else {
        ++checked;
      }
    }
    EXPECT_GT(checked, 300) << n;
  }
  // Nothing to draw: every probability 0.
  std::vector<float> zeros(100, 0.0f);
  EXPECT_EQ(DrawByMassScalar(zeros.data(), 100, 0.0), -1);
  if (DetectIsa() >= Isa::kAvx2) {
    EXPECT_EQ(DrawByMassAvx2(zeros.data(), 100, 0.0), -1);
  }
}

}  // namespace
}  // namespace loom::cpu
