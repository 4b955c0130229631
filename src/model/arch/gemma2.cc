// Gemma2ForCausalLM: Gemma block (√d-scaled embedding, (1 + w) norms, four norms per layer,
// GeGLU), attention and final logit soft-capping, alternating sliding/global layers.
#include <nlohmann/json.hpp>

#include "model/arch/gemma_common.h"
#include "model/registry.h"

namespace loom {

Status ConfigureGemma2(const nlohmann::json& j, const std::string& where, ModelConfig* c) {
  // Gemma2Config: soft-capping on by default (50 / 30); layer i slides when i is even.
  return ConfigureGemmaCommon(j, where, GemmaDefaults{50.0, 30.0, 2}, c);
}

}  // namespace loom
