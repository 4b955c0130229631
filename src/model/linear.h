// Linear: y = x·Wᵀ (+ b) for one projection — the single place every projection runs through.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tensor/tensor.h"

namespace loom {

// Thread-safety: immutable after load; Forward may run from the engine thread only (uses the
// global pool).
struct Linear {
  std::string name;         // HF module path, e.g. "model.layers.3.self_attn.q_proj"
  Tensor weight;            // [out_features, in_features], file dtype, mmap'd
  std::vector<float> bias;  // [out_features] f32, or empty

  int64_t in_features() const { return weight.dim(1); }
  int64_t out_features() const { return weight.dim(0); }

  // x: [n, in_features] f32; y: [n, out_features] f32 (overwritten).
  void Forward(const float* x, int64_t n, float* y) const;
};

}  // namespace loom
