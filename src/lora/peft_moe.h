// PEFT 0.21's rewrite of an "all-linear" LoraConfig on transformers 5 mixture-of-experts models.
#pragma once

#include "base/status.h"
#include "lora/lora_config.h"
#include "lora/site_table.h"

namespace loom {

// PEFT (utils/transformers_weight_conversion.py, _convert_peft_config_moe) rewrites
// target_modules="all-linear" on a transformers 5 MoE model before it adapts anything: the
// experts and routers, no longer nn.Linear, become target_parameters gate_up_proj, down_proj and
// gate.weight, and the fused gate_up_proj gets rank_pattern / alpha_pattern ".*\.gate_up_proj" =
// parts·r / parts·lora_alpha (gate and up: 2). The same rewrite on `cfg` when it is all-linear and
// `sites` has expert parameters; otherwise nothing. (Which linear modules all-linear keeps is the
// sites' all_linear flag, see MarkPeftMoeAllLinear.) `where` prefixes errors.
Status ApplyPeftMoeAllLinear(const SiteTable& sites, const std::string& where, LoraConfig* cfg);

}  // namespace loom
