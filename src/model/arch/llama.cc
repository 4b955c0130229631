// LlamaForCausalLM: the reference Llama block; optional attention_bias and mlp_bias.
#include <nlohmann/json.hpp>

#include "model/registry.h"

namespace loom {

Status ConfigureLlama(const nlohmann::json& j, const std::string& where, ModelConfig* c) {
  bool attention_bias = false;
  RETURN_IF_ERROR(ReadBool(j, "attention_bias", &attention_bias, where));
  c->qkv_bias = attention_bias;
  c->o_bias = attention_bias;
  return ReadBool(j, "mlp_bias", &c->mlp_bias, where);
}

}  // namespace loom
