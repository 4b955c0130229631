// Shared config parsing of Gemma 2 and Gemma 3 (text): what both read the same way.
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <string>

#include "model/config.h"

namespace loom {

// The transformers defaults that differ between Gemma2Config and Gemma3TextConfig.
struct GemmaDefaults {
  double attn_softcap;       // attn_logit_softcapping when absent (0 = None)
  double final_softcap;      // final_logit_softcapping when absent (0 = None)
  int sliding_window_pattern;  // layer i slides unless (i + 1) % pattern == 0, without layer_types
};

// Reads every Gemma field that changes the math: hidden_activation, query_pre_attn_scalar,
// soft-capping, sliding_window + layer_types, attention_bias, the Gemma defaults of
// head_dim / num_key_value_heads / tie_word_embeddings, and refuses
// use_bidirectional_attention. Sets the embedding scale and the four norms per layer.
Status ConfigureGemmaCommon(const nlohmann::json& j, const std::string& where,
                            const GemmaDefaults& defaults, ModelConfig* c);

}  // namespace loom
