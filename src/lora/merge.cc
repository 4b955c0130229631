// Merging an adapter into base weights: W' = W + scale·B·A (DoRA: g ⊙ (W + scale·B·A)), in f32.
#include "lora/merge.h"

#include <vector>

namespace loom {

void MergeLinearWeight(const Tensor& base, const LoraWeights& lw, void* out) {
  const int64_t rows = base.dim(0), in = base.dim(1);
  const int rank = lw.rank;
  std::vector<float> a(static_cast<size_t>(rank * in)), b(static_cast<size_t>(rows * rank));
  ConvertToF32(lw.a.dtype, lw.a.data, a.data(), rank * in);
  ConvertToF32(lw.b.dtype, lw.b.data, b.data(), rows * rank);
  std::vector<float> row(static_cast<size_t>(in)), delta(static_cast<size_t>(in));
  const size_t row_bytes = static_cast<size_t>(in) * DTypeSize(base.dtype);
  for (int64_t o = 0; o < rows; ++o) {
    ConvertToF32(base.dtype, static_cast<const uint8_t*>(base.data) + o * row_bytes, row.data(), in);
    // Same order as PEFT get_delta_weight: (B @ A) first, then × scaling, then W + ΔW, so
    // the f32 values (and hence their rounding to bf16) agree.
    std::fill(delta.begin(), delta.end(), 0.0f);
    for (int k = 0; k < rank; ++k) {
      const float bk = b[static_cast<size_t>(o * rank + k)];
      const float* ak = a.data() + static_cast<size_t>(k) * in;
      for (int64_t i = 0; i < in; ++i) delta[static_cast<size_t>(i)] += bk * ak[i];
    }
    for (int64_t i = 0; i < in; ++i) row[static_cast<size_t>(i)] += delta[static_cast<size_t>(i)] * lw.scale;
    if (!lw.dora_gain.empty()) {  // Same as PEFT DoRA merge: magnitude/‖W + ΔW‖ ⊙ (W + ΔW).
      const float g = lw.dora_gain[static_cast<size_t>(o)];
      for (float& v : row) v *= g;
    }
    ConvertFromF32(base.dtype, row.data(), static_cast<uint8_t*>(out) + o * row_bytes, in);
  }
}

void MergeEmbedding(const Tensor& base, const LoraEmbedding& e, void* out) {
  const int64_t vocab = base.dim(0), d = base.dim(1);
  std::vector<float> row(static_cast<size_t>(d));
  const size_t row_bytes = static_cast<size_t>(d) * DTypeSize(base.dtype);
  for (int64_t t = 0; t < vocab; ++t) {
    ConvertToF32(base.dtype, static_cast<const uint8_t*>(base.data) + t * row_bytes, row.data(), d);
    const float* at = e.a_t.data() + static_cast<size_t>(t) * e.rank;
    for (int64_t i = 0; i < d; ++i) {
      float acc = 0;
      for (int k = 0; k < e.rank; ++k) acc += e.b[static_cast<size_t>(i * e.rank + k)] * at[k];
      row[static_cast<size_t>(i)] += e.scale * acc;
      if (!e.dora_gain.empty()) row[static_cast<size_t>(i)] *= e.dora_gain[static_cast<size_t>(i)];
    }
    ConvertFromF32(base.dtype, row.data(), static_cast<uint8_t*>(out) + t * row_bytes, d);
  }
}

}  // namespace loom
