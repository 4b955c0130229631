// libFuzzer target for ParseLoraConfig: any bytes give a status, and an accepted config answers
// PEFT's matching questions (target, rank, alpha, scale) for every module path without failing.
//
// Seeds: corpus/adapter_config/ (valid-*.json exercise every accepted field; bad-*.json each break
// one rule, see tests/unit/lora_config_test.cc for the same cases with their messages). The
// corpus regression test also runs the 55 real configs in tests/fixtures/shared/adapter_configs.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "lora/lora_config.h"

namespace {

const char kWhere[] = "fuzz/adapter_config.json";

const std::vector<std::string>& ModulePaths() {
  static const std::vector<std::string> paths = {"model.embed_tokens",
                                                 "model.layers.0.self_attn.q_proj",
                                                 "model.layers.1.self_attn.k_proj",
                                                 "model.layers.2.self_attn.v_proj",
                                                 "model.layers.3.self_attn.o_proj",
                                                 "model.layers.10.mlp.gate_proj",
                                                 "model.layers.11.mlp.up_proj",
                                                 "model.layers.27.mlp.down_proj",
                                                 "lm_head"};
  return paths;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto config = loom::ParseLoraConfig(text, kWhere);
  if (!config.ok()) {
    // Errors always say something, and name the file.
    if (config.status().message().rfind(kWhere, 0) != 0) std::abort();
    return 0;
  }
  static const std::vector<std::string> linear = {"q_proj",    "k_proj",  "v_proj",   "o_proj",
                                                  "gate_proj", "up_proj", "down_proj"};
  const loom::LoraConfig& c = *config;
  if (c.r <= 0 || c.r > 4096) std::abort();
  int targeted = 0;
  for (const std::string& path : ModulePaths()) {
    targeted += c.Targets(path, linear);
    const int rank = c.RankFor(path);
    if (rank <= 0 || rank > 4096) std::abort();  // a rank is always usable as a tensor dimension
    const double scale = c.ScaleFor(path);
    if (std::isfinite(c.AlphaFor(path)) && !std::isfinite(scale)) std::abort();
  }
  volatile int sink = targeted;
  (void)sink;
  return 0;
}
