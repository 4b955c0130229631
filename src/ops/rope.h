// Rotary position embedding (transformers' rotate_half form) with linear/llama3 frequency scaling.
#pragma once

#include <cstdint>
#include <vector>


namespace loom {

enum class RopeScaling { kNone, kLinear, kLlama3 };

struct RopeConfig {
  double theta = 10000.0;
  RopeScaling scaling = RopeScaling::kNone;
  double factor = 1.0;               // linear and llama3
  double low_freq_factor = 1.0;      // llama3
  double high_freq_factor = 4.0;     // llama3
  int original_max_position = 8192;  // llama3
};

// Inverse frequencies [head_dim / 2], computed in f32 exactly as transformers does.
std::vector<float> RopeInverseFrequencies(const RopeConfig& rope, int head_dim);

// Rotates x: [n, num_heads, head_dim] in place; row r is at positions[r].
void ApplyRope(float* x, int64_t n, int num_heads, int head_dim, const int32_t* positions,
               const std::vector<float>& inv_freq);

}  // namespace loom
