// Phi3ForCausalLM (Phi-3/3.5-mini, Phi-4-mini): fused qkv/gate_up, longrope, partial rotary.
#include <cmath>
#include <nlohmann/json.hpp>

#include "model/registry.h"

namespace loom {

namespace {

// partial_rotary_factor: the RoPE parameter object's value (RopeParametersField) wins over the
// top-level one moves the top-level field into rope_parameters with setdefault). Rotary dim =
// int(head_dim·f).
Status ReadPartialRotary(const nlohmann::json& j, const std::string& where, ModelConfig* c) {
  double factor = 1.0;
  RETURN_IF_ERROR(ReadDouble(j, "partial_rotary_factor", &factor, false, where, 1e-6, 1.0));
  std::string field;
  ASSIGN_OR_RETURN(const nlohmann::json* params, RopeParametersField(j, where, &field));
  if (params) {
    RETURN_IF_ERROR(ReadDouble(*params, "partial_rotary_factor", &factor, false,
                               where + ": " + field, 1e-6, 1.0));
  }
  // A head_dim ParseModelConfig refuses after this (absent and not derivable, or odd): its
  // error names head_dim, not the rotary dim.
  if (c->head_dim <= 0 || c->head_dim % 2 != 0) return OkStatus();
  const int dim = static_cast<int>(static_cast<double>(c->head_dim) * factor);
  if (dim <= 0 || dim % 2 != 0) {
    return InvalidArgument(where + ": partial_rotary_factor " + std::to_string(factor) +
                           " gives rotary dim " + std::to_string(dim) + " of head_dim " +
                           std::to_string(c->head_dim) + "; it must be positive and even");
  }
  c->rope.rotary_dim = dim;
  return OkStatus();
}

}  // namespace

Status ConfigurePhi3(const nlohmann::json& j, const std::string& where, ModelConfig* c) {
  c->fused_qkv = true;
  c->fused_gate_up = true;
  // Phi3RotaryEmbedding accepts only default and longrope (Phi3Config.validate_rope).
  if (c->rope.scaling != RopeScaling::kNone && c->rope.scaling != RopeScaling::kLongRope) {
    return InvalidArgument(where + ": rope_scaling type must be default or longrope for " +
                           c->architecture);
  }
  RETURN_IF_ERROR(ReadPartialRotary(j, where, c));
  // One window on every layer when set (create_sliding_window_causal_mask, as Mistral).
  int window = 0;
  RETURN_IF_ERROR(ReadInt(j, "sliding_window", &window, false, where, 0));
  for (auto& layer : c->layers) layer.sliding_window = window;
  // Phi-3 projections have no biases whatever attention_bias/mlp_bias say (nn.Linear(bias=False)).
  return OkStatus();
}

}  // namespace loom
