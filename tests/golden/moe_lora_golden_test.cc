// Golden: expert LoRA on the MoE fixture models equals PEFT 0.21 — unmerged, merged, and mixed
// batches of adapters, in both adapter layouts (per-expert v4/vLLM, PEFT's native fused form).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "base/mmap_file.h"
#include "engine/engine.h"
#include "golden/golden_util.h"
#include "io/safetensors.h"
#include "lora/adapter.h"
#include "model/merged_checkpoint.h"
#include "model/model.h"

namespace loom {
namespace {

using json = nlohmann::json;

const std::string kDir = std::string(LOOM_FIXTURES) + "/golden_lora/";
const std::string kAdapters = std::string(LOOM_FIXTURES) + "/adapters/";
const std::string kModels = std::string(LOOM_FIXTURES) + "/models/";

std::vector<std::vector<float>> LoadRows(const std::string& path, size_t n) {
  auto store = SafetensorsStore::Open(path);
  EXPECT_TRUE(store.ok()) << store.status().ToString();
  std::vector<std::vector<float>> out;
  for (size_t i = 0; i < n; ++i) {
    auto t = (*store)->Get("prompt_" + std::to_string(i));
    EXPECT_TRUE(t.ok()) << t.status().ToString();
    const float* p = static_cast<const float*>(t->data);
    out.emplace_back(p, p + t->numel());
  }
  return out;
}

json LoadJson(const std::string& path) {
  auto text = ReadTextFile(path);
  EXPECT_TRUE(text.ok()) << path;
  return json::parse(*text);
}

GenerationRequest Request(const std::vector<int32_t>& prompt, int max_tokens, int slot) {
  GenerationRequest r;
  r.prompt = prompt;
  r.params.temperature = 0;
  r.params.max_tokens = max_tokens;
  r.params.ignore_eos = true;
  r.return_prompt_logits = true;
  r.adapter_slot = slot;
  return r;
}

// Each prompt alone; returns [prompt] (prompt logits, greedy ids).
std::vector<GenerationResult> RunAlone(Model* model, std::shared_ptr<const Adapter> adapter,
                                       const std::vector<std::vector<int32_t>>& prompts, int steps) {
  std::vector<GenerationResult> out;
  for (const auto& p : prompts) {
    Engine engine(model, EngineOptions{});
    const int slot = adapter ? engine.AddAdapter(adapter) : -1;
    EXPECT_TRUE(engine.Add(Request(p, steps, slot)).ok());
    out.push_back(std::move(engine.RunToCompletion().at(0)));
  }
  return out;
}

class MoeLoraGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(MoeLoraGolden, UnmergedAndMergedMatchPeft) {
  const std::string name = GetParam();
  const json ref = LoadJson(kDir + name + ".json");
  const std::string base = ref["base"];
  const float tol = test::GoldenTolerance(base);
  const auto prompts = ref["prompts"].get<std::vector<std::vector<int32_t>>>();
  const int steps = static_cast<int>(ref["unmerged"]["greedy"][0].size());
  auto model = Model::Load(kModels + base);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  auto adapter = LoadAdapter(name, kAdapters + name, (*model)->sites(), 0);
  ASSERT_TRUE(adapter.ok()) << adapter.status().ToString();

  const auto unmerged = RunAlone(model->get(), *adapter, prompts, steps);
  const auto ref_unmerged = LoadRows(kDir + name + ".unmerged.safetensors", prompts.size());
  float worst = 0;
  for (size_t p = 0; p < prompts.size(); ++p) {
    SCOPED_TRACE("unmerged prompt " + std::to_string(p));
    ASSERT_EQ(unmerged[p].prompt_logits.size(), ref_unmerged[p].size());
    const float d = test::MaxAbsDiff(unmerged[p].prompt_logits.data(), ref_unmerged[p].data(), ref_unmerged[p].size());
    worst = std::max(worst, d);
    EXPECT_LE(d, tol);
    EXPECT_EQ(unmerged[p].generated, ref["unmerged"]["greedy"][p].get<std::vector<int32_t>>());
  }
  RecordProperty("unmerged_max_abs_diff", std::to_string(worst));

  auto merged_model = Model::Load(kModels + base);
  ASSERT_TRUE(merged_model.ok());
  ASSERT_TRUE((*merged_model)->MergeAdapter(**adapter).ok());
  const auto merged = RunAlone(merged_model->get(), nullptr, prompts, steps);
  const auto ref_merged = LoadRows(kDir + name + ".merged.safetensors", prompts.size());
  worst = 0;
  for (size_t p = 0; p < prompts.size(); ++p) {
    SCOPED_TRACE("merged prompt " + std::to_string(p));
    const float d = test::MaxAbsDiff(merged[p].prompt_logits.data(), ref_merged[p].data(), ref_merged[p].size());
    worst = std::max(worst, d);
    EXPECT_LE(d, tol);
    EXPECT_EQ(merged[p].generated, ref["merged"]["greedy"][p].get<std::vector<int32_t>>());
  }
  RecordProperty("merged_max_abs_diff", std::to_string(worst));

  // `loom merge` writes every expert's (and the router's, under its checkpoint name) merged
  // weights: the written checkpoint equals the merged run.
  namespace fs = std::filesystem;
  const fs::path out = fs::temp_directory_path() / ("loom_merge_" + name);
  fs::remove_all(out);
  Status st = WriteMergedCheckpoint(kModels + base, **model, **adapter, out.string(), 100 * 1024);
  ASSERT_TRUE(st.ok()) << st.ToString();
  auto written = Model::Load(out.string());
  ASSERT_TRUE(written.ok()) << written.status().ToString();
  const auto reloaded = RunAlone(written->get(), nullptr, prompts, 1);
  for (size_t p = 0; p < prompts.size(); ++p) {
    EXPECT_EQ(test::MaxAbsDiff(reloaded[p].prompt_logits.data(), merged[p].prompt_logits.data(),
                               merged[p].prompt_logits.size()), 0.0f);
  }
  fs::remove_all(out);
}

// Both layouts: per-expert modules (v4 / vLLM) and PEFT's fused expert parameters
// (target_parameters, transformers 5), with the router (Mixtral) and attention projections.
INSTANTIATE_TEST_SUITE_P(Adapters, MoeLoraGolden,
                         ::testing::Values("qwen3_moe_experts_v4", "qwen3_moe_native",
                                           "mixtral_experts_v4", "mixtral_native"),
                         [](const auto& info) { return info.param; });

// Rows of different adapters (and base rows) in one continuously batched run, arriving at
// different steps with a small row budget, so one expert's rows span several adapters. PEFT
// refuses adapter_names with expert LoRA, so each row's reference is its adapter's PEFT run alone.
class MoeLoraMixed : public ::testing::TestWithParam<std::string> {};

TEST_P(MoeLoraMixed, RowsMatchPeftForTheirAdapter) {
  const json ref = LoadJson(kDir + "mixed_" + GetParam() + ".json");
  const std::string base = ref["base"];
  const auto prompts = ref["prompts"].get<std::vector<std::vector<int32_t>>>();
  const auto names = ref["adapter_names"].get<std::vector<std::string>>();
  auto model = Model::Load(kModels + base);
  ASSERT_TRUE(model.ok());
  EngineOptions options;
  options.max_batch_tokens = 9;
  Engine engine(model->get(), options);
  std::map<std::string, int> slots;
  for (const std::string& n : names) {
    if (n == "__base__" || slots.count(n)) continue;
    auto a = LoadAdapter(n, kAdapters + n, (*model)->sites(), 0);
    ASSERT_TRUE(a.ok()) << a.status().ToString();
    slots[n] = engine.AddAdapter(*a);
  }
  std::vector<int64_t> ids;
  for (size_t p = 0; p < prompts.size(); ++p) {
    const int slot = names[p] == "__base__" ? -1 : slots.at(names[p]);
    ids.push_back(*engine.Add(Request(prompts[p], 32, slot)));
    engine.Step();
  }
  auto results = engine.RunToCompletion();
  ASSERT_EQ(results.size(), prompts.size());
  for (const auto& r : results) {
    const size_t p = static_cast<size_t>(std::find(ids.begin(), ids.end(), r.id) - ids.begin());
    SCOPED_TRACE("row " + std::to_string(p) + " (" + names[p] + ")");
    std::vector<float> want;
    std::vector<int32_t> greedy;
    if (names[p] == "__base__") {
      const auto g = test::LoadGolden(base);
      want = g.prompt_logits[p];
      greedy = g.greedy[p];
    } else {
      want = LoadRows(kDir + names[p] + ".unmerged.safetensors", prompts.size())[p];
      greedy = LoadJson(kDir + names[p] + ".json")["unmerged"]["greedy"][p].get<std::vector<int32_t>>();
    }
    EXPECT_LE(test::MaxAbsDiff(r.prompt_logits.data(), want.data(), want.size()), 1e-4f);
    EXPECT_EQ(r.generated, greedy);
  }
}

INSTANTIATE_TEST_SUITE_P(Bases, MoeLoraMixed, ::testing::Values("qwen3_moe_f32", "mixtral_f32"),
                         [](const auto& info) { return info.param; });

// PEFT's fused expert tensors whose parameter target_parameters does not name are refused,
// naming the parameter.
TEST(MoeLoraNative, UntargetedExpertParameterIsRefused) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / "loom_moe_untargeted";
  fs::remove_all(dir);
  fs::create_directories(dir);
  fs::copy_file(kAdapters + "qwen3_moe_native/adapter_model.safetensors", dir / "adapter_model.safetensors");
  json cfg = LoadJson(kAdapters + "qwen3_moe_native/adapter_config.json");
  cfg["target_parameters"] = json::array({"mlp.experts.down_proj"});
  {
    std::ofstream f(dir / "adapter_config.json");
    f << cfg.dump();
  }
  auto model = Model::Load(kModels + "qwen3_moe_f32");
  ASSERT_TRUE(model.ok());
  auto adapter = LoadAdapter("x", dir.string(), (*model)->sites(), 0);
  ASSERT_FALSE(adapter.ok());
  EXPECT_NE(adapter.status().message().find("mlp.experts.gate_up_proj', which target_parameters does not name"),
            std::string::npos)
      << adapter.status().ToString();
  fs::remove_all(dir);
}

}  // namespace
}  // namespace loom
