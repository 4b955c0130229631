// The table of supported architectures (adding one = a file in arch/ + a line here).
#include "model/registry.h"

namespace loom {

const std::vector<ArchEntry>& Architectures() {
  static const std::vector<ArchEntry> kArchs = {
      {"LlamaForCausalLM", &ConfigureLlama},
      {"MistralForCausalLM", &ConfigureMistral},
      {"Qwen2ForCausalLM", &ConfigureQwen2},
      {"Qwen3ForCausalLM", &ConfigureQwen3},
      {"Gemma2ForCausalLM", &ConfigureGemma2, &PrepareGemmaWeights, /*reads_hidden_act=*/false},
      {"Gemma3ForCausalLM", &ConfigureGemma3, &PrepareGemmaWeights, /*reads_hidden_act=*/false},
      {"Phi3ForCausalLM", &ConfigurePhi3},
      {"Qwen3MoeForCausalLM", &ConfigureQwen3Moe},
      {"MixtralForCausalLM", &ConfigureMixtral},
  };
  return kArchs;
}

const ArchEntry* FindArchitecture(const std::string& hf_name) {
  for (const auto& a : Architectures()) {
    if (hf_name == a.hf_name) return &a;
  }
  return nullptr;
}

std::string SupportedArchitectureList() {
  std::string s;
  for (const auto& a : Architectures()) {
    if (!s.empty()) s += ", ";
    s += a.hf_name;
  }
  return s;
}

}  // namespace loom
