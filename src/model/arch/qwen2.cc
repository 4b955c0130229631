// Qwen2ForCausalLM: Llama block with q/k/v biases; sliding window per layer when enabled.
#include <algorithm>
#include <nlohmann/json.hpp>

#include "model/registry.h"

namespace loom {

Status ConfigureQwenSlidingWindow(const nlohmann::json& j, const std::string& where,
                                  ModelConfig* c) {
  int window = 0;
  RETURN_IF_ERROR(ReadInt(j, "sliding_window", &window, false, where));
  auto types = j.find("layer_types");
  if (types != j.end() && types->is_array()) {
    if (types->size() != c->layers.size()) {
      return InvalidArgument(where + ": layer_types has " + std::to_string(types->size()) +
                             " entries for " + std::to_string(c->layers.size()) + " layers");
    }
    for (size_t i = 0; i < c->layers.size(); ++i) {
      const auto& t = (*types)[i];
      if (t == "sliding_attention") {
        if (window <= 0) return InvalidArgument(where + ": sliding layer without sliding_window");
        c->layers[i].sliding_window = window;
      } else if (t != "full_attention") {
        return InvalidArgument(where + ": layer_types entry " + t.dump() + " is not supported");
      }
    }
    return OkStatus();
  }
  // Same rule as transformers: layers from max_window_layers on use the window.
  bool use_sliding = false;
  RETURN_IF_ERROR(ReadBool(j, "use_sliding_window", &use_sliding, where));
  if (!use_sliding || window <= 0) return OkStatus();
  int max_window_layers = c->num_layers;
  RETURN_IF_ERROR(ReadInt(j, "max_window_layers", &max_window_layers, false, where));
  // A negative max_window_layers makes every layer slide there too (and must not index
  // before the first layer).
  for (int i = std::max(max_window_layers, 0); i < c->num_layers; ++i) {
    c->layers[static_cast<size_t>(i)].sliding_window = window;
  }
  return OkStatus();
}

Status ConfigureQwen2(const nlohmann::json& j, const std::string& where, ModelConfig* c) {
  c->qkv_bias = true;
  return ConfigureQwenSlidingWindow(j, where, c);
}

}  // namespace loom
