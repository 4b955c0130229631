// MixtralForCausalLM: the Mistral block with a mixture-of-experts MLP on every layer
// (block_sparse_moe, experts w1/w3/w2); softmax over the top-k router logits.
#include <nlohmann/json.hpp>

#include "model/arch/moe.h"
#include "model/registry.h"

namespace loom {

Status ConfigureMixtral(const nlohmann::json& j, const std::string& where, ModelConfig* c) {
  RETURN_IF_ERROR(ConfigureMistral(j, where, c));  // sliding_window on every layer when set
  MoeConfig& moe = c->moe;
  RETURN_IF_ERROR(ParseMoeCommon(j, where, &moe));
  if (moe.num_experts == 0) {
    return InvalidArgument(where + ": field 'num_local_experts' must be positive");
  }
  moe.expert_ffn_dim = c->ffn_dim;  // intermediate_size is the expert size
  moe.norm_topk = true;             // top-k probabilities renormalised, always
  moe.block = "block_sparse_moe";
  moe.gate = "w1";
  moe.up = "w3";
  moe.down = "w2";
  for (auto& layer : c->layers) layer.moe = true;
  // router_jitter_noise only perturbs training; output_router_logits/router_aux_loss_coef are
  // training outputs too.
  return OkStatus();
}

}  // namespace loom
