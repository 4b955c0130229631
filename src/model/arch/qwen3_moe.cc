// Qwen3MoeForCausalLM: the Qwen3 block (q/k norm) with a mixture-of-experts MLP on the sparse
// layers (decoder_sparse_step, mlp_only_layers); norm_topk_prob renormalises the top k.
#include <algorithm>
#include <nlohmann/json.hpp>

#include "base/json.h"
#include "model/arch/moe.h"
#include "model/registry.h"

namespace loom {

Status ConfigureQwen3Moe(const nlohmann::json& j, const std::string& where, ModelConfig* c) {
  c->qk_norm = true;
  bool attention_bias = false;
  RETURN_IF_ERROR(ReadBool(j, "attention_bias", &attention_bias, where));
  c->qkv_bias = attention_bias;
  c->o_bias = attention_bias;
  // transformers 5: sliding_window applies to every layer when use_sliding_window (no
  // max_window_layers rule in Qwen3MoeConfig); layer_types is not one of its fields.
  bool use_sliding = false;
  RETURN_IF_ERROR(ReadBool(j, "use_sliding_window", &use_sliding, where));
  int window = 0;
  if (use_sliding) {
    RETURN_IF_ERROR(ReadInt(j, "sliding_window", &window, false, where, 0, kMaxConfigPositions));
  }
  for (auto& layer : c->layers) layer.sliding_window = window;
  if (auto t = j.find("layer_types"); t != j.end() && !t->is_null()) {
    if (!t->is_array()) return InvalidArgument(where + ": 'layer_types' must be a list");
    for (const auto& v : *t) {
      if (!v.is_string() || v.get_ref<const std::string&>() != "full_attention") {
        return InvalidArgument(where + ": layer_types entry " + v.dump() +
                               " is not supported by Qwen3MoeForCausalLM");
      }
    }
  }

  MoeConfig& moe = c->moe;
  RETURN_IF_ERROR(ParseMoeCommon(j, where, &moe));
  RETURN_IF_ERROR(ReadBool(j, "norm_topk_prob", &moe.norm_topk, where));
  int sparse_step = 1;
  RETURN_IF_ERROR(ReadInt(j, "decoder_sparse_step", &sparse_step, false, where, 1, kMaxConfigLayers));
  std::vector<int32_t> dense_layers;
  RETURN_IF_ERROR(GetOptionalIntList(j, "mlp_only_layers", where, &dense_layers, 0,
                                     c->num_layers - 1, static_cast<size_t>(kMaxConfigLayers)));
  bool any_sparse = false;
  for (int i = 0; i < c->num_layers; ++i) {
    const bool dense = std::find(dense_layers.begin(), dense_layers.end(), i) != dense_layers.end();
    c->layers[static_cast<size_t>(i)].moe =
        !dense && moe.num_experts > 0 && (i + 1) % sparse_step == 0;
    any_sparse = any_sparse || c->layers[static_cast<size_t>(i)].moe;
  }
  if (any_sparse) {
    RETURN_IF_ERROR(ReadInt(j, "moe_intermediate_size", &moe.expert_ffn_dim, true, where, 1,
                            kMaxConfigFfnDim));
  }
  return OkStatus();
}

}  // namespace loom
