// Mixture-of-experts block shared by Qwen3-MoE and Mixtral: router, top-k, per-expert MLPs.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "base/status.h"
#include "lora/site_table.h"
#include "model/config.h"
#include "model/linear.h"

namespace loom {

// One expert: a gated MLP (the model's hidden_act, as transformers' ACT2FN[config.hidden_act]),
// named by its checkpoint module path (model.layers.L.mlp.experts.E.gate_proj /
// ...block_sparse_moe.experts.E.w1).
struct ExpertWeights {
  Linear gate;  // [expert_ffn_dim, model_dim]
  Linear up;    // [expert_ffn_dim, model_dim]
  Linear down;  // [model_dim, expert_ffn_dim]
};

struct MoeWeights {
  Linear router;                       // [num_experts, model_dim] (…mlp.gate)
  std::vector<ExpertWeights> experts;  // [num_experts]; empty = a dense layer
};

// out [n, model_dim] = Σ over each row's top-k experts of weight · expert(h), as transformers'
// SparseMoeBlock: router logits in f32, softmax, top-k, optional renormalisation; each
// expert runs once on the rows routed to it (gathered, with their adapters' segments), and a
// row's expert outputs are added in ascending expert order. h: [n, model_dim]. Returns the bytes
// of expert weights read: only the routed experts' (top_k experts' three matrices for one row).
// `act`: the model's activation (config.hidden_act), which transformers' experts apply too.
int64_t MoeForward(const MoeWeights& w, const MoeConfig& c, Activation act, const float* h,
                   int64_t n, float* out, const LoraBatch& lora);

// gate[i] = act(gate[i]) · up[i] for i < count: the gated MLP's activation, dense and expert.
void GatedActivationInPlace(Activation act, float* gate, const float* up, int64_t count);

// Registers a sparse layer's expert parameters as transformers 5 names them
// (`prefix`mlp.experts.gate_up_proj / down_proj) and, where the checkpoint's block is not "mlp",
// the router's in-memory path `prefix`mlp.gate as an alias. `prefix`: "model.layers.L.".
void AddMoeSites(const MoeWeights& w, const MoeConfig& c, const std::string& prefix, SiteTable* sites);

// PEFT 0.21's "all-linear" on transformers 5 MoE models (its _convert_peft_config_moe): the
// experts and the router are no nn.Linear there; all-linear reaches them as target_parameters
// (gate_up_proj, down_proj, gate.weight) instead, and every module whose leaf name is a
// transformers 4 expert/router name (gate, `c.gate`/`c.up`/`c.down`: also a dense mlp_only layer's
// gate_proj/up_proj/down_proj) leaves the linear set. Clears all_linear on those sites.
void MarkPeftMoeAllLinear(const MoeConfig& c, SiteTable* sites);

// Reads num_experts (or num_local_experts), num_experts_per_tok, and rejects by name the
// MoE fields loom does not implement (shared experts). The caller sets expert_ffn_dim,
// norm_topk and which layers are sparse.
Status ParseMoeCommon(const nlohmann::json& j, const std::string& where, MoeConfig* moe);

}  // namespace loom
