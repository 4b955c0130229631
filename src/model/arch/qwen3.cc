// Qwen3ForCausalLM: Llama block with per-head RMSNorm on q and k, explicit head_dim.
#include <nlohmann/json.hpp>

#include "model/registry.h"

namespace loom {

Status ConfigureQwen3(const nlohmann::json& j, const std::string& where, ModelConfig* c) {
  c->qk_norm = true;
  bool attention_bias = false;
  RETURN_IF_ERROR(ReadBool(j, "attention_bias", &attention_bias, where));
  c->qkv_bias = attention_bias;
  c->o_bias = attention_bias;
  return ConfigureQwenSlidingWindow(j, where, c);
}

}  // namespace loom
