// Rotary position embedding (transformers' rotate_half form) with linear/llama3/longrope scaling.
#pragma once

#include <cstdint>
#include <vector>


namespace loom {

enum class RopeScaling { kNone, kLinear, kLlama3, kLongRope };

struct RopeConfig {
  double theta = 10000.0;
  RopeScaling scaling = RopeScaling::kNone;
  double factor = 1.0;               // linear and llama3
  double low_freq_factor = 1.0;      // llama3
  double high_freq_factor = 4.0;     // llama3
  int original_max_position = 8192;  // llama3; longrope: the short/long switch length
  // longrope (Phi-3 "su"): inv_freq[i] = 1 / (ext[i] · theta^(2i/dim)), ext = short_factor while
  // a sequence has at most original_max_position tokens, long_factor beyond; cos and sin are
  // multiplied by attention_factor.
  std::vector<double> short_factor;  // [rotary_dim / 2]
  std::vector<double> long_factor;   // [rotary_dim / 2]
  double attention_factor = 1.0;
  int rotary_dim = 0;  // rotated leading dims of each head (partial_rotary_factor); 0 = head_dim
};

// Rotated dims per head: rope.rotary_dim, or head_dim when 0.
inline int RopeDim(const RopeConfig& rope, int head_dim) {
  return rope.rotary_dim > 0 ? rope.rotary_dim : head_dim;
}

// Inverse frequencies [RopeDim / 2], computed in f32 exactly as transformers does. `long_context`
// selects longrope's long_factor set (ignored by the other scalings).
std::vector<float> RopeInverseFrequencies(const RopeConfig& rope, int head_dim,
                                          bool long_context = false);

// Rotates x: [n, num_heads, head_dim] in place; row r is at positions[r]. Only the first
// 2·inv_freq.size() dims of each head rotate (partial rotary); cos and sin are multiplied by
// `scale` (longrope's attention factor) as transformers does.
void ApplyRope(float* x, int64_t n, int num_heads, int head_dim, const int32_t* positions,
               const std::vector<float>& inv_freq, float scale = 1.0f);

// ApplyRope in two parts, so a forward pass computes each row's cos and sin once for all its
// layers: RopeAngles fills cos_out, sin_out [n, inv_freq.size()] exactly as ApplyRope computes
// them; ApplyRopeTable rotates x [n, num_heads, head_dim] with them (over the thread pool).
void RopeAngles(int64_t n, const int32_t* positions, const std::vector<float>& inv_freq,
                float scale, float* cos_out, float* sin_out);
void ApplyRopeTable(float* x, int64_t n, int num_heads, int head_dim, int half, const float* cos_t,
                    const float* sin_t);

}  // namespace loom
