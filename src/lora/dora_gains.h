// DoRA's gains, computed once when an adapter loads (PEFT's DoraLinearLayer / DoraEmbeddingLayer).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "lora/adapter.h"
#include "tensor/tensor.h"

namespace loom {

// A projection's: g[o] = magnitude[o] / ‖W[o,:] + scale·(B·A)[o,:]‖₂, where `base_row(o, dst)`
// writes W[o, :] in f32. a: [rank, in], b: [out, rank].
std::vector<float> DoraGains(const std::vector<float>& magnitude, const std::vector<float>& a,
                             const std::vector<float>& b, int64_t out, int64_t in, int rank,
                             double scale, const std::function<void(int64_t, float*)>& base_row);

// An embedding's (fan_in_fan_out): per embedding dimension i over the vocabulary,
// gain[i] = magnitude[i] / ‖E[:, i] + scale·Δ[:, i]‖ with Δ[t, i] = (B·A)[i, t]. table: [vocab, d],
// f32, bf16 or f16.
std::vector<float> EmbeddingDoraGains(const std::vector<float>& magnitude, const Tensor& table,
                                      const LoraEmbedding& e);

}  // namespace loom
