// Golden: loom with PEFT adapters equals PEFT — unmerged, merged, mixed batches — and the adapter
// visibly changes the output (proof it is applied).
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "base/mmap_file.h"
#include "engine/engine.h"
#include "golden/golden_util.h"
#include "io/safetensors.h"
#include "lora/adapter.h"
#include "lora/merge.h"
#include "model/merged_checkpoint.h"
#include "model/model.h"

namespace loom {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

const std::string kDir = std::string(LOOM_FIXTURES) + "/golden_lora/";
const std::string kAdapters = std::string(LOOM_FIXTURES) + "/adapters/";
const std::string kModels = std::string(LOOM_FIXTURES) + "/models/";

std::vector<std::vector<float>> LoadRows(const std::string& path, const std::string& prefix, size_t n) {
  auto store = SafetensorsStore::Open(path);
  EXPECT_TRUE(store.ok()) << store.status().ToString();
  std::vector<std::vector<float>> out;
  for (size_t i = 0; i < n; ++i) {
    auto t = (*store)->Get(prefix + std::to_string(i));
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

// Runs each prompt alone (slot 0 = the adapter, or base when adapter is null) and returns
// prompt logits and greedy tokens.
struct PromptRun {
  std::vector<std::vector<float>> logits;
  std::vector<std::vector<int32_t>> greedy;
};
PromptRun RunPrompts(Model* model, std::shared_ptr<const Adapter> adapter,
               const std::vector<std::vector<int32_t>>& prompts, int max_tokens) {
  PromptRun run;
  for (const auto& p : prompts) {
    Engine engine(model, EngineOptions{});
    GenerationRequest r;
    r.prompt = p;
    r.params.temperature = 0;
    r.params.max_tokens = max_tokens;
    r.params.ignore_eos = true;
    r.return_prompt_logits = true;
    if (adapter) r.adapter_slot = engine.AddAdapter(adapter);
    EXPECT_TRUE(engine.Add(r).ok());
    auto res = engine.RunToCompletion();
    run.logits.push_back(res.at(0).prompt_logits);
    run.greedy.push_back(res.at(0).generated);
  }
  return run;
}

class LoraGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(LoraGolden, UnmergedMergedAndMergeCommandMatchPeft) {
  const std::string name = GetParam();
  const json ref = LoadJson(kDir + name + ".json");
  const std::string base = ref["base"];
  const bool bf16 = base.find("bf16") != std::string::npos;
  const float tol = test::GoldenTolerance(base);
  const auto prompts = ref["prompts"].get<std::vector<std::vector<int32_t>>>();
  const int steps = static_cast<int>(ref["unmerged"]["greedy"][0].size());

  auto model = Model::Load(kModels + base);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  auto adapter = LoadAdapter(name, kAdapters + name, (*model)->sites(), 0);
  ASSERT_TRUE(adapter.ok()) << adapter.status().ToString();

  // Unmerged == PEFT unmerged.
  const PromptRun unmerged = RunPrompts(model->get(), *adapter, prompts, steps);
  const auto ref_unmerged = LoadRows(kDir + name + ".unmerged.safetensors", "prompt_", prompts.size());
  const auto base_logits = test::LoadGolden(base).prompt_logits;
  float delta = 0;
  for (size_t p = 0; p < prompts.size(); ++p) {
    SCOPED_TRACE("prompt " + std::to_string(p));
    ASSERT_EQ(unmerged.logits[p].size(), ref_unmerged[p].size());
    EXPECT_LE(test::MaxAbsDiff(unmerged.logits[p].data(), ref_unmerged[p].data(), ref_unmerged[p].size()), tol);
    EXPECT_EQ(unmerged.greedy[p], ref["unmerged"]["greedy"][p].get<std::vector<int32_t>>());
    delta = std::max(delta, test::MaxAbsDiff(unmerged.logits[p].data(), base_logits[p].data(), base_logits[p].size()));
  }
  // Proof the adapter is applied: it moves the logits far beyond the tolerance.
  EXPECT_GT(delta, 1000 * tol);

  // Merged (W + scale·B·A rounded to the weight dtype) == PEFT merged (bf16: merged_bf16).
  const std::string merged_key = bf16 ? "merged_bf16" : "merged";
  const auto ref_merged = LoadRows(kDir + name + "." + merged_key + ".safetensors", "prompt_", prompts.size());
  auto merged_model = Model::Load(kModels + base);
  ASSERT_TRUE(merged_model.ok());
  ASSERT_TRUE((*merged_model)->MergeAdapter(**adapter).ok());
  const PromptRun merged = RunPrompts(merged_model->get(), nullptr, prompts, steps);
  for (size_t p = 0; p < prompts.size(); ++p) {
    SCOPED_TRACE("merged prompt " + std::to_string(p));
    EXPECT_LE(test::MaxAbsDiff(merged.logits[p].data(), ref_merged[p].data(), ref_merged[p].size()), tol);
    EXPECT_EQ(merged.greedy[p], ref[merged_key]["greedy"][p].get<std::vector<int32_t>>());
  }

  // `loom merge` writes a checkpoint that loads as a plain model and equals the merged run.
  const fs::path out = fs::temp_directory_path() / ("loom_merge_" + name);
  fs::remove_all(out);
  Status st = WriteMergedCheckpoint(kModels + base, **model, **adapter, out.string(), 100 * 1024);
  if (!(*adapter)->config().lora_bias) {
    ASSERT_TRUE(st.ok()) << st.ToString();
    auto written = Model::Load(out.string());
    ASSERT_TRUE(written.ok()) << written.status().ToString();
    EXPECT_TRUE(fs::exists(out / "model.safetensors.index.json"));  // 100 KiB shards
    const PromptRun reloaded = RunPrompts(written->get(), nullptr, prompts, 1);
    for (size_t p = 0; p < prompts.size(); ++p) {
      EXPECT_EQ(test::MaxAbsDiff(reloaded.logits[p].data(), merged.logits[p].data(), merged.logits[p].size()), 0.0f);
    }
  } else {  // a bias the base config cannot express: refused with a reason
    ASSERT_FALSE(st.ok());
    EXPECT_NE(st.message().find("has no bias"), std::string::npos) << st.message();
  }
  fs::remove_all(out);
}

INSTANTIATE_TEST_SUITE_P(
    Adapters, LoraGolden,
    ::testing::Values("llama_qv_r8_f32", "llama_all_r4_f16", "llama_mlp_r6", "llama_bf16_rslora",
                      "llama_embed", "mistral_regex", "mistral_layers", "qwen2_exclude",
                      "qwen2_lmhead_tied", "qwen3_lora_bias", "qwen3_dora", "qwen3_bf16_dora_bf16",
                      "gemma2_all_r8", "gemma2_bf16_qv", "gemma3_all_linear_r4", "gemma3_mlp_r6_f16",
                      "gemma3_bf16_qko"),
    [](const auto& info) { return info.param; });

// PEFT's mixed-batch forward (adapter_names=[...], "__base__" rows) row by row, and the same
// requests as one continuously batched run with staggered arrivals and chunked prefill.
class LoraMixedBatch : public ::testing::TestWithParam<std::string> {};

TEST_P(LoraMixedBatch, MatchesPeftAdapterNamesForward) {
  const json ref = LoadJson(kDir + GetParam() + ".json");
  const auto prompts = ref["prompts"].get<std::vector<std::vector<int32_t>>>();
  const auto names = ref["adapter_names"].get<std::vector<std::string>>();
  const auto rows = LoadRows(kDir + GetParam() + ".safetensors", "row_", prompts.size());
  auto model = Model::Load(kModels + std::string(ref["base"]));
  ASSERT_TRUE(model.ok());
  EngineOptions options;
  options.max_batch_tokens = 9;
  Engine engine(model->get(), options);
  std::map<std::string, int> slots;
  for (const auto& [name, rel] : ref["adapters"].items()) {
    auto a = LoadAdapter(name, kAdapters + name, (*model)->sites(), 0);
    ASSERT_TRUE(a.ok()) << a.status().ToString();
    slots[name] = engine.AddAdapter(*a);
  }
  std::vector<int64_t> ids;
  for (size_t p = 0; p < prompts.size(); ++p) {
    GenerationRequest r;
    r.prompt = prompts[p];
    r.params.temperature = 0;
    r.params.max_tokens = static_cast<int>(ref["greedy"][p].size());
    r.params.ignore_eos = true;
    r.return_prompt_logits = true;
    r.adapter_slot = names[p] == "__base__" ? -1 : slots.at(names[p]);
    ids.push_back(*engine.Add(r));
    engine.Step();  // arrivals between steps: prefill and decode rows of several adapters mix
  }
  auto results = engine.RunToCompletion();
  ASSERT_EQ(results.size(), prompts.size());
  for (const auto& r : results) {
    const size_t p = static_cast<size_t>(std::find(ids.begin(), ids.end(), r.id) - ids.begin());
    SCOPED_TRACE("row " + std::to_string(p) + " (" + names[p] + ")");
    EXPECT_LE(test::MaxAbsDiff(r.prompt_logits.data(), rows[p].data(), rows[p].size()), 1e-4f);
    EXPECT_EQ(r.generated, ref["greedy"][p].get<std::vector<int32_t>>());
  }
}

INSTANTIATE_TEST_SUITE_P(Bases, LoraMixedBatch, ::testing::Values("mixed_llama", "mixed_gemma3"),
                         [](const auto& info) { return info.param; });

// Gemma: PEFT multiplies an embedding LoRA delta by embed_scale (√hidden) like the base row. The
// embedding is tied to the head, so loom's merge unties it and must equal PEFT's unmerged run.
TEST(LoraGoldenGemma, EmbeddingLoraScaledLikeTheRowUnmergedAndMerged) {
  const std::string name = "gemma3_embed_v";
  const json ref = LoadJson(kDir + name + ".json");
  const auto prompts = ref["prompts"].get<std::vector<std::vector<int32_t>>>();
  const int steps = static_cast<int>(ref["unmerged"]["greedy"][0].size());
  const auto want = LoadRows(kDir + name + ".unmerged.safetensors", "prompt_", prompts.size());
  const float tol = test::GoldenTolerance(ref["base"]);
  auto model = Model::Load(kModels + std::string(ref["base"]));
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  auto adapter = LoadAdapter(name, kAdapters + name, (*model)->sites(), 0);
  ASSERT_TRUE(adapter.ok()) << adapter.status().ToString();
  ASSERT_NE((*adapter)->embedding(), nullptr);
  auto merged_model = Model::Load(kModels + std::string(ref["base"]));
  ASSERT_TRUE(merged_model.ok());
  ASSERT_TRUE((*merged_model)->MergeAdapter(**adapter).ok());
  const PromptRun unmerged = RunPrompts(model->get(), *adapter, prompts, steps);
  const PromptRun merged = RunPrompts(merged_model->get(), nullptr, prompts, steps);
  for (size_t p = 0; p < prompts.size(); ++p) {
    SCOPED_TRACE("prompt " + std::to_string(p));
    const auto greedy = ref["unmerged"]["greedy"][p].get<std::vector<int32_t>>();
    EXPECT_LE(test::MaxAbsDiff(unmerged.logits[p].data(), want[p].data(), want[p].size()), tol);
    EXPECT_EQ(unmerged.greedy[p], greedy);
    EXPECT_LE(test::MaxAbsDiff(merged.logits[p].data(), want[p].data(), want[p].size()), tol);
    EXPECT_EQ(merged.greedy[p], greedy);
  }
}

// A DoRA adapter (PEFT refuses adapter_names with DoRA) in a batch with another adapter and
// base rows gives, row by row, exactly what each request gives alone.
TEST(LoraMixedDora, DoraAndLoraAndBaseRowsEqualEachAlone) {
  auto model = Model::Load(kModels + "qwen3_f32");
  ASSERT_TRUE(model.ok());
  auto dora = LoadAdapter("dora", kAdapters + "qwen3_dora", (*model)->sites(), 0);
  auto bias = LoadAdapter("bias", kAdapters + "qwen3_lora_bias", (*model)->sites(), 0);
  ASSERT_TRUE(dora.ok() && bias.ok());
  const auto golden = test::LoadGolden("qwen3_f32");
  const std::vector<std::shared_ptr<const Adapter>> order = {*dora, nullptr, *bias, *dora};
  std::vector<std::vector<int32_t>> alone;
  for (size_t p = 0; p < 4; ++p) {
    alone.push_back(RunPrompts(model->get(), order[p], {golden.prompts[p]}, 12).greedy[0]);
  }
  EngineOptions options;
  options.max_batch_tokens = 6;
  Engine engine(model->get(), options);
  const int s_dora = engine.AddAdapter(*dora), s_bias = engine.AddAdapter(*bias);
  const int slots[4] = {s_dora, -1, s_bias, s_dora};
  for (size_t p = 0; p < 4; ++p) {
    GenerationRequest r;
    r.prompt = golden.prompts[p];
    r.params.temperature = 0;
    r.params.max_tokens = 12;
    r.params.ignore_eos = true;
    r.adapter_slot = slots[p];
    ASSERT_TRUE(engine.Add(r).ok());
  }
  for (const auto& r : engine.RunToCompletion()) EXPECT_EQ(r.generated, alone[static_cast<size_t>(r.id)]);
}

}  // namespace
}  // namespace loom
