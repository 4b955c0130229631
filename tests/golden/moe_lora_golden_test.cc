// Golden: expert LoRA on the MoE fixture models equals PEFT 0.21 — unmerged, merged, and mixed
// batches of adapters, in both adapter layouts (per-expert v4/vLLM, PEFT's native fused form).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
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
                                           "mixtral_experts_v4", "mixtral_native",
                                           // PEFT's LoraConfig(target_modules="all-linear") as saved
                                           "qwen3_moe_all_linear", "mixtral_all_linear",
                                           // rank_pattern / alpha_pattern on expert parameters
                                           "qwen3_moe_native_pattern", "mixtral_native_pattern"),
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

INSTANTIATE_TEST_SUITE_P(Bases, MoeLoraMixed,
                         ::testing::Values("qwen3_moe_f32", "mixtral_f32",  // all-linear, pattern adapters:
                                           "qwen3_moe_f32_more", "mixtral_f32_more"),
                         [](const auto& info) { return info.param; });

// A copy of adapter `name` with `edit` applied to its config, in a fresh temp folder.
std::filesystem::path EditedCopy(const std::string& name, const std::string& tag,
                                 const std::function<void(json*)>& edit) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("loom_moe_" + tag);
  fs::remove_all(dir);
  fs::create_directories(dir);
  fs::copy_file(kAdapters + name + "/adapter_model.safetensors", dir / "adapter_model.safetensors");
  json cfg = LoadJson(kAdapters + name + "/adapter_config.json");
  edit(&cfg);
  std::ofstream(dir / "adapter_config.json") << cfg.dump();
  return dir;
}

// target_modules "all-linear" as a user writes it: no target_parameters, no patterns.
void ToAllLinearString(json* c) {
  (*c)["target_modules"] = "all-linear";
  (*c)["target_parameters"] = nullptr;
  (*c)["rank_pattern"] = json::object();
  (*c)["alpha_pattern"] = json::object();
}

// target_modules "all-linear" as a user writes it (no target_parameters, no patterns): loom
// applies PEFT's MoE rewrite (experts and router as parameters, gate_up_proj at rank 2r and alpha
// 2·alpha, a dense layer's MLP left out) and matches the saved, rewritten config's golden.
class MoeLoraAllLinear : public ::testing::TestWithParam<std::string> {};

TEST_P(MoeLoraAllLinear, StringConfigMatchesTheSavedOne) {
  const std::string name = GetParam();
  const json ref = LoadJson(kDir + name + ".json");
  const std::string base = ref["base"];
  const auto prompts = ref["prompts"].get<std::vector<std::vector<int32_t>>>();
  const auto dir = EditedCopy(name, name + "_string", ToAllLinearString);
  auto model = Model::Load(kModels + base);
  ASSERT_TRUE(model.ok());
  auto adapter = LoadAdapter(name, dir.string(), (*model)->sites(), 0);
  ASSERT_TRUE(adapter.ok()) << adapter.status().ToString();
  const auto got = RunAlone(model->get(), *adapter, prompts, 1);
  const auto want = LoadRows(kDir + name + ".unmerged.safetensors", prompts.size());
  for (size_t p = 0; p < prompts.size(); ++p) {
    EXPECT_LE(test::MaxAbsDiff(got[p].prompt_logits.data(), want[p].data(), want[p].size()),
              test::GoldenTolerance(base));
  }
  std::filesystem::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Adapters, MoeLoraAllLinear, ::testing::Values("qwen3_moe_all_linear", "mixtral_all_linear"),
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

// An expert LoRA whose rank is not what r / rank_pattern give its parameter is refused, naming
// the tensor and the parameter (PEFT would fail to load it: the shapes differ).
TEST(MoeLoraNative, ExpertRankNotThePatternsIsRefused) {
  const auto dir = EditedCopy("qwen3_moe_native_pattern", "rank_mismatch",
                              [](json* c) { (*c)["rank_pattern"].erase("experts.down_proj"); });
  auto model = Model::Load(kModels + "qwen3_moe_f32");
  ASSERT_TRUE(model.ok());
  auto adapter = LoadAdapter("x", dir.string(), (*model)->sites(), 0);
  ASSERT_FALSE(adapter.ok());
  EXPECT_NE(adapter.status().message().find("rank 6 per expert for 8 experts, but r/rank_pattern give "
                                            "'model.layers.0.mlp.experts.down_proj' rank 4"),
            std::string::npos)
      << adapter.status().ToString();
  std::filesystem::remove_all(dir);
}

// Rewrites `dir`/adapter_model.safetensors without the tensors whose name contains `drop` (when
// not empty) and with `add` added.
void RewriteTensors(const std::filesystem::path& dir, const std::string& drop, std::vector<TensorToWrite> add) {
  const std::string file = (dir / "adapter_model.safetensors").string();
  {
    auto store = SafetensorsStore::Open(file);
    ASSERT_TRUE(store.ok());
    for (const std::string& n : (*store)->names()) {
      if (!drop.empty() && n.find(drop) != std::string::npos) continue;
      const Tensor t = *(*store)->Get(n);
      add.push_back({n, t.dtype, t.shape, t.data});
    }
    ASSERT_TRUE(WriteSafetensors(file + ".new", add).ok());
  }
  std::filesystem::rename(file + ".new", file);
}


// Every tensor of an all-linear adapter has a place, and every place all-linear reaches has its
// tensors; otherwise the load fails naming the module. all-linear on Qwen3-MoE leaves the dense
// (mlp_only) layer's MLP alone, as PEFT does; the fused gate_up_proj is at rank 2r.
TEST(MoeLoraNative, AllLinearPlacesEveryTensorOrRefuses) {
  auto model = Model::Load(kModels + "qwen3_moe_f32");
  ASSERT_TRUE(model.ok());
  auto expect_error = [&](const std::filesystem::path& dir, const std::string& text) {
    auto adapter = LoadAdapter("x", dir.string(), (*model)->sites(), 0);
    ASSERT_FALSE(adapter.ok());
    EXPECT_NE(adapter.status().message().find(text), std::string::npos) << adapter.status().ToString();
    std::filesystem::remove_all(dir);
  };
  std::vector<float> a(4 * 64, 0.f), b(96 * 4, 0.f);
  const std::vector<TensorToWrite> dense = {
      {"base_model.model.model.layers.1.mlp.gate_proj.lora_A.weight", DType::kF32, {4, 64}, a.data()},
      {"base_model.model.model.layers.1.mlp.gate_proj.lora_B.weight", DType::kF32, {96, 4}, b.data()}};
  for (const bool as_string : {false, true}) {  // a LoRA on layer 1's dense gate_proj added
    const auto dir = EditedCopy("qwen3_moe_all_linear", "dense_mlp", [&](json* c) {
      if (as_string) ToAllLinearString(c);
    });
    RewriteTensors(dir, "", dense);
    expect_error(dir, "adapts 'model.layers.1.mlp.gate_proj', which adapter_config.json does not target");
  }
  {  // layer 2's router tensors removed
    const auto dir = EditedCopy("qwen3_moe_all_linear", "no_router", ToAllLinearString);
    RewriteTensors(dir, "layers.2.mlp.gate.", {});
    expect_error(dir, "targets 'model.layers.2.mlp.gate.weight' (target_parameters, from all-linear) but");
  }
  {  // layer 0's down_proj tensors removed
    const auto dir = EditedCopy("qwen3_moe_all_linear", "no_down", ToAllLinearString);
    RewriteTensors(dir, "layers.0.mlp.experts.lora_", {});
    expect_error(dir, "targets 'model.layers.0.mlp.experts.down_proj' (target_parameters, from all-linear) but");
  }
  // A file with the experts at rank r (PEFT's native layout without all-linear's 2r).
  expect_error(EditedCopy("qwen3_moe_native", "rank_r", ToAllLinearString),
               "rank 4 per expert for 8 experts, but r/rank_pattern give 'model.layers.0.mlp.experts.gate_up_proj' "
               "rank 8");
}

}  // namespace
}  // namespace loom
