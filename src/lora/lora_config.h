// adapter_config.json → LoraConfig, with PEFT's rules for which modules an adapter targets.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/regex.h"
#include "base/status.h"

namespace loom {

// Thread-safety: immutable after parsing.
struct LoraConfig {
  int r = 8;
  double lora_alpha = 8;
  bool use_rslora = false;
  bool use_dora = false;
  // PEFT 0.18+: on a model whose head is tied to its embedding, an embedding target also adapts
  // the head (PEFT ties the two LoRAs and saves the head's A and B too).
  bool ensure_weight_tying = false;
  bool lora_bias = false;
  // target_modules: a list (exact path or ".name" suffix), a regex (full match), or all-linear.
  std::vector<std::string> target_list;
  std::optional<Regex> target_regex;
  bool all_linear = false;
  // target_parameters: parameter paths (exact or ".name" suffix), e.g. "mlp.experts.gate_up_proj".
  std::vector<std::string> target_parameters;
  std::vector<std::string> exclude_list;
  std::optional<Regex> exclude_regex;
  std::vector<int> layers_to_transform;   // empty = every layer
  std::vector<std::string> layers_pattern;
  std::vector<Regex> layers_regex;  // each as PEFT matches it: .*\.{pattern}\.(\d+)\.
  // rank_pattern / alpha_pattern in file order: (compiled "(.*\.)?(key)$", value).
  std::vector<std::pair<Regex, int>> rank_pattern;
  std::vector<std::pair<Regex, double>> alpha_pattern;
  std::string base_model_name_or_path;
  std::vector<std::string> ignored_keys;  // unknown keys (PEFT adds fields every release)

  // PEFT's check_target_module_exists for a module path such as
  // "model.layers.3.self_attn.q_proj". `linear_names` are the model's linear module names
  // ("q_proj", ...; not lm_head) that all-linear expands to.
  bool Targets(const std::string& module_path, const std::vector<std::string>& linear_names) const;
  // Whether target_parameters names the parameter at `param_path` (exact or dotted suffix).
  bool TargetsParameter(const std::string& param_path) const;
  int RankFor(const std::string& module_path) const;
  double AlphaFor(const std::string& module_path) const;
  // Same as PEFT: alpha / r, or alpha / sqrt(r) with use_rslora.
  double ScaleFor(const std::string& module_path) const;
};

// Parses adapter_config.json text; `where` (the file path) prefixes every error. Rejections
// follow SPEC-adapters.md §5, each with its own message.
StatusOr<LoraConfig> ParseLoraConfig(const std::string& json_text, const std::string& where);

}  // namespace loom
