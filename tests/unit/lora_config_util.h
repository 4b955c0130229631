// Helpers of the adapter_config.json tests: a minimal config to patch, parsing that must succeed,
// and a Llama model's module paths.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "lora/lora_config.h"

namespace loom {

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

inline const std::string kRealConfigs = std::string(LOOM_FIXTURES) + "/shared/adapter_configs";
inline const char kWhere[] = "test/adapter_config.json";
inline const std::vector<std::string> kLinearNames = {"q_proj",    "k_proj",  "v_proj",   "o_proj",
                                                      "gate_proj", "up_proj", "down_proj"};

inline ::testing::AssertionResult Contains(const std::string& text, const std::string& part) {
  if (text.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "'" << part << "' not in: " << text;
}

// A minimal valid config; `patch` adds or replaces keys (a null value in `erase` removes one).
inline std::string Config(const ojson& patch = ojson::object(),
                          const std::vector<std::string>& erase = {}) {
  ojson j = {{"peft_type", "LORA"},
             {"r", 8},
             {"lora_alpha", 16},
             {"target_modules", {"q_proj", "v_proj"}}};
  for (auto it = patch.begin(); it != patch.end(); ++it) j[it.key()] = it.value();
  for (const auto& k : erase) j.erase(k);
  return j.dump(2);
}

inline LoraConfig MustParse(const std::string& text) {
  auto c = ParseLoraConfig(text, kWhere);
  EXPECT_TRUE(c.ok()) << c.status().ToString() << "\n" << text;
  return c.ok() ? std::move(c).value() : LoraConfig{};
}

// Module paths of a Llama-family model with `layers` layers, as LoadAdapter enumerates them.
inline std::vector<std::string> LlamaModulePaths(int layers) {
  std::vector<std::string> paths = {"model.embed_tokens"};
  for (int i = 0; i < layers; ++i) {
    for (const auto& m : kLinearNames) {
      const bool attn = m == "q_proj" || m == "k_proj" || m == "v_proj" || m == "o_proj";
      paths.push_back("model.layers." + std::to_string(i) + (attn ? ".self_attn." : ".mlp.") + m);
    }
  }
  paths.push_back("lm_head");
  return paths;
}

inline std::set<std::string> Targeted(const LoraConfig& c, int layers) {
  std::set<std::string> out;
  for (const auto& p : LlamaModulePaths(layers)) {
    if (c.Targets(p, kLinearNames)) out.insert(p);
  }
  return out;
}

}  // namespace loom
