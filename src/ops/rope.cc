// RoPE: x[i] ← x[i]·cos − x[i+h]·sin, x[i+h] ← x[i+h]·cos + x[i]·sin (h = rotary_dim/2).
#include "ops/rope.h"

#include <cmath>

#include "ops/panel_blocks.h"

namespace loom {

std::vector<float> RopeInverseFrequencies(const RopeConfig& rope, int head_dim, bool long_context) {
  const int dim = RopeDim(rope, head_dim);
  const int half = dim / 2;
  std::vector<float> inv(static_cast<size_t>(half));
  // Same as transformers: 1 / theta^(arange(0, dim, 2).float() / dim), all in f32.
  for (int i = 0; i < half; ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(dim);
    const float power = std::pow(static_cast<float>(rope.theta), exponent);
    if (rope.scaling == RopeScaling::kLongRope) {
      // Same as transformers _compute_longrope_parameters: 1 / (ext · theta^(...)), in f32.
      const auto& ext = long_context ? rope.long_factor : rope.short_factor;
      const float e = static_cast<size_t>(i) < ext.size()
                          ? static_cast<float>(ext[static_cast<size_t>(i)])
                          : 1.0f;
      inv[static_cast<size_t>(i)] = 1.0f / (e * power);
    } else {
      inv[static_cast<size_t>(i)] = 1.0f / power;
    }
  }
  switch (rope.scaling) {
    case RopeScaling::kNone: break;
    case RopeScaling::kLongRope:
      break;
    case RopeScaling::kLinear:
      for (float& f : inv) f = f / static_cast<float>(rope.factor);
      break;
    case RopeScaling::kLlama3: {
      // Same as transformers _compute_llama3_parameters.
      const float factor = static_cast<float>(rope.factor);
      const float low = static_cast<float>(rope.low_freq_factor);
      const float high = static_cast<float>(rope.high_freq_factor);
      const float old_len = static_cast<float>(rope.original_max_position);
      const float low_freq_wavelen = old_len / low;
      const float high_freq_wavelen = old_len / high;
      const float kPi = 3.141592653589793f;
      for (float& f : inv) {
        const float wavelen = 2 * kPi / f;
        float scaled = wavelen > low_freq_wavelen ? f / factor : f;
        const bool medium = !(wavelen < high_freq_wavelen) && !(wavelen > low_freq_wavelen);
        if (medium) {
          const float smooth = (old_len / wavelen - low) / (high - low);
          scaled = (1 - smooth) * scaled / factor + smooth * scaled;
        }
        f = scaled;
      }
      break;
    }
  }
  return inv;
}

void RopeAngles(int64_t n, const int32_t* positions, const std::vector<float>& inv_freq,
                float scale, float* cos_out, float* sin_out) {
  const int64_t half = static_cast<int64_t>(inv_freq.size());
  ForEachRowRange(n, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float pos = static_cast<float>(positions[r]);
      for (int64_t i = 0; i < half; ++i) {
        const float angle = pos * inv_freq[static_cast<size_t>(i)];  // f32 product, as torch
        // f32 cos/sin, then × the attention factor in f32 (a no-op at 1)
        cos_out[r * half + i] = static_cast<float>(std::cos(static_cast<double>(angle))) * scale;
        sin_out[r * half + i] = static_cast<float>(std::sin(static_cast<double>(angle))) * scale;
      }
    }
  });
}

void ApplyRopeTable(float* x, int64_t n, int num_heads, int head_dim, int half, const float* cos_t,
                    const float* sin_t) {
  ForEachRowRange(n, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* cr = cos_t + r * half;
      const float* sr = sin_t + r * half;
      for (int h = 0; h < num_heads; ++h) {
        float* v = x + (r * num_heads + h) * head_dim;
        for (int i = 0; i < half; ++i) {
          const float a = v[i];
          const float b = v[i + half];
          v[i] = a * cr[i] - b * sr[i];
          v[i + half] = b * cr[i] + a * sr[i];
        }
      }
    }
  });
}

void ApplyRope(float* x, int64_t n, int num_heads, int head_dim, const int32_t* positions,
               const std::vector<float>& inv_freq, float scale) {
  const int half = static_cast<int>(inv_freq.size());  // rotary_dim / 2 ≤ head_dim / 2
  std::vector<float> cos_t(static_cast<size_t>(n * half)), sin_t(static_cast<size_t>(n * half));
  RopeAngles(n, positions, inv_freq, scale, cos_t.data(), sin_t.data());
  ApplyRopeTable(x, n, num_heads, head_dim, half, cos_t.data(), sin_t.data());
}

}  // namespace loom
