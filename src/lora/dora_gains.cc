// DoRA's per-row (projection) and per-dimension (embedding) gains, computed once at load.
#include "lora/dora_gains.h"

#include <algorithm>
#include <cmath>

#include "tensor/dtype.h"

namespace loom {

// PEFT DoRA's gains, computed once: g[o] = magnitude[o] / ‖W[o,:] + scale·(B·A)[o,:]‖₂, where
// `base_row(o, dst)` writes W[o, :] in f32. a: [rank, in], b: [out, rank]. (B·A) is built for
// kRows output rows at a time over contiguous rows of A, each element summing its rank terms in
// the order k = 0..rank-1 (reading A down its columns for one output element at a time made a
// rank-4096 DoRA load ~300× slower than the same adapter without DoRA).
std::vector<float> DoraGains(const std::vector<float>& magnitude, const std::vector<float>& a,
                             const std::vector<float>& b, int64_t out, int64_t in, int rank,
                             double scale, const std::function<void(int64_t, float*)>& base_row) {
  constexpr int64_t kRows = 16;
  const size_t n_in = static_cast<size_t>(in);
  std::vector<float> gains(static_cast<size_t>(out)), w(n_in),
      delta(static_cast<size_t>(kRows) * n_in);
  for (int64_t o0 = 0; o0 < out; o0 += kRows) {
    const int64_t rows = std::min(kRows, out - o0);
    std::fill(delta.begin(), delta.end(), 0.0f);
    for (int k = 0; k < rank; ++k) {
      const float* ak = a.data() + static_cast<size_t>(k) * n_in;
      for (int64_t j = 0; j < rows; ++j) {
        const float bk = b[static_cast<size_t>((o0 + j) * rank + k)];
        float* d = delta.data() + static_cast<size_t>(j) * n_in;
        for (size_t i = 0; i < n_in; ++i) d[i] += bk * ak[i];
      }
    }
    for (int64_t j = 0; j < rows; ++j) {
      base_row(o0 + j, w.data());
      const float* d = delta.data() + static_cast<size_t>(j) * n_in;
      double norm2 = 0;
      for (size_t i = 0; i < n_in; ++i) {
        const double v = w[i] + scale * d[i];
        norm2 += v * v;
      }
      gains[static_cast<size_t>(o0 + j)] =
          static_cast<float>(magnitude[static_cast<size_t>(o0 + j)] / std::sqrt(norm2));
    }
  }
  return gains;
}

// PEFT's DoRA on an embedding (DoraEmbeddingLayer, fan_in_fan_out): the norm is per embedding
// dimension i, over the vocabulary: gain[i] = magnitude[i] / ‖E[:, i] + scale·Δ[:, i]‖ with
// Δ[t, i] = (B·A)[i, t]. One pass over the table (vocab × dim × rank), token rows in order.
std::vector<float> EmbeddingDoraGains(const std::vector<float>& magnitude, const Tensor& table,
                                      const LoraEmbedding& e) {
  const int64_t vocab = table.dim(0), d = table.dim(1);
  const size_t row_bytes = static_cast<size_t>(d) * DTypeSize(table.dtype);
  const size_t n = static_cast<size_t>(d);
  // B transposed to [rank, d], so a token's delta is rank passes over contiguous rows (the
  // compiler vectorizes them; a rank-long dot product per element was a dependent chain: ~10 s
  // for a 152k × 3584 table at rank 16). Each element still sums its rank terms in order k = 0...
  std::vector<float> bt(static_cast<size_t>(e.rank) * n);
  for (int k = 0; k < e.rank; ++k) {
    for (size_t i = 0; i < n; ++i)
      bt[static_cast<size_t>(k) * n + i] = e.b[i * static_cast<size_t>(e.rank) + k];
  }
  std::vector<double> norm2(n, 0.0);
  std::vector<float> row(n), delta(n);
  for (int64_t t = 0; t < vocab; ++t) {
    ConvertToF32(table.dtype,
                 static_cast<const uint8_t*>(table.data) + static_cast<size_t>(t) * row_bytes,
                 row.data(), d);
    const float* at = e.a_t.data() + static_cast<size_t>(t) * e.rank;
    std::fill(delta.begin(), delta.end(), 0.0f);
    for (int k = 0; k < e.rank; ++k) {
      const float a = at[k];
      const float* bk = bt.data() + static_cast<size_t>(k) * n;
      for (size_t i = 0; i < n; ++i) delta[i] += bk[i] * a;
    }
    for (size_t i = 0; i < n; ++i) {
      const double v = static_cast<double>(row[i]) + static_cast<double>(e.scale) * delta[i];
      norm2[i] += v * v;
    }
  }
  std::vector<float> gains(n);
  for (size_t i = 0; i < n; ++i) gains[i] = static_cast<float>(magnitude[i] / std::sqrt(norm2[i]));
  return gains;
}

}  // namespace loom
