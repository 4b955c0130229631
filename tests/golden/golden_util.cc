// Golden dump loader (JSON + safetensors written by tools/ref/make_models.py).
#include "golden/golden_util.h"

#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "base/mmap_file.h"
#include "io/safetensors.h"

namespace loom::test {

std::vector<std::string> GoldenModelNames() {
  std::vector<std::string> names;
  for (const char* arch : {"llama", "mistral", "qwen2", "qwen3", "gemma2", "gemma3"}) {
    for (const char* dt : {"f32", "bf16"}) names.push_back(std::string(arch) + "_" + dt);
  }
  return names;
}

float GoldenTolerance(const std::string& name) {
  return name.find("bf16") != std::string::npos ? 2e-3f : 1e-4f;
}

float MaxAbsDiff(const float* a, const float* b, size_t n) {
  float m = 0;
  for (size_t i = 0; i < n; ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

namespace {
std::vector<std::vector<float>> LoadLogits(const std::string& path, size_t count) {
  auto store = SafetensorsStore::Open(path);
  EXPECT_TRUE(store.ok()) << store.status().ToString();
  std::vector<std::vector<float>> out;
  for (size_t i = 0; i < count; ++i) {
    auto t = (*store)->Get("prompt_" + std::to_string(i));
    EXPECT_TRUE(t.ok()) << t.status().ToString();
    const float* p = static_cast<const float*>(t->data);
    out.emplace_back(p, p + t->numel());
  }
  return out;
}
}  // namespace

GoldenModel LoadGolden(const std::string& name) {
  const std::string dir = std::string(LOOM_FIXTURES) + "/golden/";
  GoldenModel g;
  g.name = name;
  g.model_dir = std::string(LOOM_FIXTURES) + "/models/" + name;
  auto text = ReadTextFile(dir + name + ".json");
  EXPECT_TRUE(text.ok());
  auto j = nlohmann::json::parse(*text);
  g.prompts = j["prompts"].get<std::vector<std::vector<int32_t>>>();
  g.greedy = j["greedy"].get<std::vector<std::vector<int32_t>>>();
  for (const auto& per_prompt : j["top_logprobs"]) {
    std::vector<std::vector<std::pair<int32_t, float>>> steps;
    for (const auto& step : per_prompt) {
      std::vector<std::pair<int32_t, float>> top;
      for (const auto& e : step) top.emplace_back(e[0].get<int32_t>(), e[1].get<float>());
      steps.push_back(top);
    }
    g.top_logprobs.push_back(steps);
  }
  g.prompt_logits = LoadLogits(dir + name + ".logits.safetensors", g.prompts.size());
  g.greedy_logits = LoadLogits(dir + name + ".greedy.safetensors", g.prompts.size());
  return g;
}

}  // namespace loom::test
