// Linear forward: base matmul then bias.
#include "model/linear.h"

#include "ops/matmul.h"

namespace loom {

void Linear::Forward(const float* x, int64_t n, float* y) const {
  Matmul(x, n, weight, y);
  if (!bias.empty()) {
    const int64_t out = out_features();
    for (int64_t r = 0; r < n; ++r) {
      float* yr = y + r * out;
      for (int64_t j = 0; j < out; ++j) yr[j] += bias[static_cast<size_t>(j)];
    }
  }
}

}  // namespace loom
