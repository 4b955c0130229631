// Architecture registry: HF "architectures" name → the function that fills what differs.
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "base/status.h"
#include "model/config.h"

namespace loom {

// An architecture reads its own config.json fields (after the shared Llama-family ones
// are parsed) and sets what differs: biases, q/k norm, sliding windows.
using ConfigureArchFn = Status (*)(const nlohmann::json& j, const std::string& where,
                                   ModelConfig* config);

struct ModelWeights;
// Optional: adjusts the loaded weights to the shared forward (Gemma: RMSNorm (1 + w) → w').
using PrepareWeightsFn = Status (*)(const ModelConfig& config, ModelWeights* weights);

struct ArchEntry {
  const char* hf_name;
  ConfigureArchFn configure;
  PrepareWeightsFn prepare_weights = nullptr;
  // Whether config.json's hidden_act picks the MLP activation (Gemma 2/3 read hidden_activation
  // and ignore hidden_act, as transformers does).
  bool reads_hidden_act = true;
};

const std::vector<ArchEntry>& Architectures();
const ArchEntry* FindArchitecture(const std::string& hf_name);
std::string SupportedArchitectureList();  // "LlamaForCausalLM, MistralForCausalLM, ..."

// One per file in model/arch/.
Status ConfigureLlama(const nlohmann::json& j, const std::string& where, ModelConfig* config);
Status ConfigureMistral(const nlohmann::json& j, const std::string& where, ModelConfig* config);
Status ConfigureQwen2(const nlohmann::json& j, const std::string& where, ModelConfig* config);
Status ConfigureQwen3(const nlohmann::json& j, const std::string& where, ModelConfig* config);
Status ConfigureQwen3Moe(const nlohmann::json& j, const std::string& where, ModelConfig* config);
Status ConfigureMixtral(const nlohmann::json& j, const std::string& where, ModelConfig* config);
Status ConfigureGemma2(const nlohmann::json& j, const std::string& where, ModelConfig* config);
Status ConfigureGemma3(const nlohmann::json& j, const std::string& where, ModelConfig* config);
// Gemma 2/3 (gemma_common.cc): RMSNorm scales by (1 + w); every norm weight becomes 1 + w.
Status PrepareGemmaWeights(const ModelConfig& config, ModelWeights* weights);
Status ConfigurePhi3(const nlohmann::json& j, const std::string& where, ModelConfig* config);

// Shared by Qwen2 and Qwen3: layer_types, or use_sliding_window + max_window_layers.
Status ConfigureQwenSlidingWindow(const nlohmann::json& j, const std::string& where,
                                  ModelConfig* config);

}  // namespace loom
