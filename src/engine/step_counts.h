// StepCounts: how many engine steps ran with how many token rows, sequences and distinct adapters
// (histograms /metrics shows).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

namespace loom {

// N fixed upper bounds (Prometheus `le`) and a count per bucket (not cumulative; the last bucket
// is above every bound), plus the sum of the observed values. Fixed sizes: a copy allocates
// nothing and a bucket can never be missing. Not thread-safe: the engine thread observes, and
// readers take a copy (AsyncEngine's stats snapshot).
template <size_t N>
struct StepHistogram {
  std::array<double, N> bounds;
  std::array<int64_t, N + 1> counts{};
  double sum = 0;
  void Observe(double v) {
    size_t i = 0;
    while (i < N && v > bounds[i]) ++i;
    ++counts[i];
    sum += v;
  }
};

struct StepCounts {
  StepHistogram<13> tokens{{1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384}};
  StepHistogram<11> sequences{{1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024}};
  // Every count up to 8 has its own bucket, so "more than --max-loras adapters in a step" reads
  // off one bucket for the usual settings.
  StepHistogram<14> adapters{{0, 1, 2, 3, 4, 5, 6, 7, 8, 12, 16, 24, 32, 64}};
};

}  // namespace loom
