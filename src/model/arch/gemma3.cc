// Gemma3ForCausalLM (text): the Gemma 2 block with q/k norms, no soft-capping by default, and
// separate RoPE for sliding (local) and full (global) layers, scaling on the global one.
#include <nlohmann/json.hpp>
#include <utility>

#include "model/arch/gemma_common.h"
#include "model/registry.h"

namespace loom {

namespace {

// transformers 5 (Gemma3TextConfig.convert_rope_params_to_dict): rope_parameters per layer type,
// {"full_attention": {...}, "sliding_attention": {...}}; the legacy rope_scaling updates the
// full one; a missing theta comes from rope_theta (full, default 1e6) or rope_local_base_freq
// (sliding, default 1e4).
Status ParseGemma3Rope(const nlohmann::json& j, const std::string& where, ModelConfig* c) {
  RopeConfig global, local;
  global.theta = 1e6;
  local.theta = 1e4;
  RETURN_IF_ERROR(ReadDouble(j, "rope_theta", &global.theta, false, where));
  RETURN_IF_ERROR(ReadDouble(j, "rope_local_base_freq", &local.theta, false, where));
  auto params = j.find("rope_parameters");
  if (params != j.end() && !params->is_null()) {
    if (!params->is_object() ||
        (!params->contains("full_attention") && !params->contains("sliding_attention"))) {
      return InvalidArgument(where + ": field 'rope_parameters' must map full_attention / "
                                     "sliding_attention to their RoPE parameters");
    }
    for (auto [key, rope] : {std::pair{"full_attention", &global}, {"sliding_attention", &local}}) {
      auto it = params->find(key);
      if (it == params->end() || it->is_null()) continue;
      if (!it->is_object()) {
        return InvalidArgument(where + ": field 'rope_parameters." + key + "' must be an object");
      }
      RETURN_IF_ERROR(ParseRopeParameters(*it, where + ": rope_parameters." + key, rope));
    }
  }
  auto scaling = j.find("rope_scaling");
  if (scaling != j.end() && !scaling->is_null()) {
    if (!scaling->is_object()) return InvalidArgument(where + ": field 'rope_scaling' must be an object");
    RETURN_IF_ERROR(ParseRopeParameters(*scaling, where + ": rope_scaling", &global));
  }
  for (const RopeConfig* r : {&global, &local}) {
    if (!(r->theta > 0)) return InvalidArgument(where + ": RoPE theta must be positive");
  }
  c->rope = global;
  c->rope_local = local;
  for (LayerConfig& l : c->layers) l.local_rope = l.sliding_window > 0;
  return OkStatus();
}

}  // namespace

Status ConfigureGemma3(const nlohmann::json& j, const std::string& where, ModelConfig* c) {
  c->qk_norm = true;
  // Gemma3TextConfig: no soft-capping by default; without layer_types every
  // sliding_window_pattern-th layer (default 6) is global.
  int pattern = 6;
  RETURN_IF_ERROR(ReadInt(j, "sliding_window_pattern", &pattern, false, where, 1, kMaxConfigLayers));
  RETURN_IF_ERROR(ConfigureGemmaCommon(j, where, GemmaDefaults{0.0, 0.0, pattern}, c));
  // transformers 5.24's Gemma3Attention reads attn_logit_softcapping but never passes it to the
  // attention function: the value is validated above and has no effect, as there.
  c->attn_softcap = 0;
  return ParseGemma3Rope(j, where, c);
}

}  // namespace loom
