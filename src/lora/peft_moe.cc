// PEFT's all-linear rewrite on MoE models: expert and router parameters, fused-rank patterns.
#include "lora/peft_moe.h"

#include <algorithm>
#include <utility>

namespace loom {

namespace {

// PEFT assigns into its pattern dict: an existing key keeps its place, a new key goes last.
template <typename T>
Status SetPattern(const std::string& key, T value, const std::string& where,
                  std::vector<std::pair<Regex, T>>* patterns) {
  ASSIGN_OR_RETURN(Regex re, Regex::Compile("(.*\\.)?(" + key + ")$", where));
  for (auto& [existing, v] : *patterns) {
    if (existing.pattern() == re.pattern()) {
      v = value;
      return OkStatus();
    }
  }
  patterns->emplace_back(std::move(re), value);
  return OkStatus();
}

}  // namespace

Status ApplyPeftMoeAllLinear(const SiteTable& sites, const std::string& where, LoraConfig* cfg) {
  if (!cfg->all_linear || sites.expert_params().empty()) return OkStatus();
  for (const char* name : {"gate_up_proj", "down_proj", "gate.weight"}) {
    if (std::find(cfg->target_parameters.begin(), cfg->target_parameters.end(), name) ==
        cfg->target_parameters.end()) {
      cfg->target_parameters.push_back(name);
    }
  }
  // Parts fused into gate_up_proj (gate, up): the rank and alpha it gets.
  const int parts = sites.expert_params().front().parts.empty()
                        ? 1
                        : static_cast<int>(sites.expert_params().front().parts.front().size());
  if (parts > 1) {
    RETURN_IF_ERROR(SetPattern(".*\\.gate_up_proj", cfg->r * parts, where + " rank_pattern", &cfg->rank_pattern));
    RETURN_IF_ERROR(SetPattern(".*\\.gate_up_proj", cfg->lora_alpha * parts, where + " alpha_pattern",
                               &cfg->alpha_pattern));
  }
  return OkStatus();
}

}  // namespace loom
