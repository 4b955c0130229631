// StepCounts: how many engine steps ran with how many token rows, sequences and distinct adapters
// (histograms /metrics shows).
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

namespace loom {

// Fixed upper bounds (Prometheus `le`) and a count per bucket (not cumulative; the last bucket
// is above every bound), plus the sum of the observed values. Not thread-safe: the engine thread
// observes, and readers take a copy (AsyncEngine's stats snapshot).
struct StepHistogram {
  explicit StepHistogram(std::vector<double> upper_bounds)
      : bounds(std::move(upper_bounds)), counts(bounds.size() + 1, 0) {}
  void Observe(double v) {
    size_t i = 0;
    while (i < bounds.size() && v > bounds[i]) ++i;
    ++counts[i];
    sum += v;
  }
  std::vector<double> bounds;
  std::vector<int64_t> counts;
  double sum = 0;
};

struct StepCounts {
  StepHistogram tokens{{1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384}};
  StepHistogram sequences{{1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024}};
  // Every count up to 8 has its own bucket, so "more than --max-loras adapters in a step" reads
  // off one bucket for the usual settings.
  StepHistogram adapters{{0, 1, 2, 3, 4, 5, 6, 7, 8, 12, 16, 24, 32, 64}};
};

}  // namespace loom
