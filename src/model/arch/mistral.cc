// MistralForCausalLM: Llama block with a sliding attention window on every layer when set.
#include <nlohmann/json.hpp>

#include "model/registry.h"

namespace loom {

Status ConfigureMistral(const nlohmann::json& j, const std::string& where, ModelConfig* c) {
  int window = 0;
  RETURN_IF_ERROR(ReadInt(j, "sliding_window", &window, false, where));
  if (window < 0) return InvalidArgument(where + ": sliding_window must be positive");
  for (auto& layer : c->layers) layer.sliding_window = window;
  return OkStatus();
}

}  // namespace loom
