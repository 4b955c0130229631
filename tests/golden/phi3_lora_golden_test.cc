// Golden: PEFT LoRA on Phi-3's fused qkv_proj / gate_up_proj (and o/down) equals PEFT — unmerged,
// merged, and a mixed batch of two adapters and base rows.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <map>
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

namespace fs = std::filesystem;
using json = nlohmann::json;

const std::string kDir = std::string(LOOM_FIXTURES) + "/golden_lora/";
const std::string kAdapters = std::string(LOOM_FIXTURES) + "/adapters/";
const std::string kModels = std::string(LOOM_FIXTURES) + "/models/";

std::vector<std::vector<float>> LoadRows(const std::string& path, const std::string& prefix,
                                         size_t n) {
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

StatusOr<std::shared_ptr<const Adapter>> LoadFor(const Model& model, const std::string& name) {
  return LoadAdapter(name, kAdapters + name, model.sites(), 0);
}

GenerationRequest Request(const std::vector<int32_t>& prompt, int steps, int slot) {
  GenerationRequest r;
  r.prompt = prompt;
  r.params.temperature = 0;
  r.params.max_tokens = steps;
  r.params.ignore_eos = true;
  r.return_prompt_logits = true;
  r.adapter_slot = slot;
  return r;
}

// Each prompt alone; slot 0 = `adapter` (null = base). Every prompt + continuation crosses
// original_max_position_embeddings, so the decode runs through the longrope recompute.
// Returns the prompt logits.
std::vector<std::vector<float>> ExpectRunsMatch(Model* model,
                                                std::shared_ptr<const Adapter> adapter,
                                                const json& ref, const std::string& mode,
                                                const std::vector<std::vector<float>>& ref_logits,
                                                float tol) {
  const auto prompts = ref["prompts"].get<std::vector<std::vector<int32_t>>>();
  std::vector<std::vector<float>> logits;
  for (size_t p = 0; p < prompts.size(); ++p) {
    SCOPED_TRACE(mode + " prompt " + std::to_string(p));
    const auto greedy = ref[mode]["greedy"][p].get<std::vector<int32_t>>();
    Engine engine(model, EngineOptions{});
    const int slot = adapter ? engine.AddAdapter(adapter) : -1;
    EXPECT_TRUE(engine.Add(Request(prompts[p], static_cast<int>(greedy.size()), slot)).ok());
    auto res = engine.RunToCompletion();
    EXPECT_EQ(res.size(), 1u);
    if (res.size() != 1 || res[0].prompt_logits.size() != ref_logits[p].size()) {
      ADD_FAILURE() << "no result or wrong prompt logits size";
      logits.emplace_back();
      continue;
    }
    EXPECT_LE(
        test::MaxAbsDiff(res[0].prompt_logits.data(), ref_logits[p].data(), ref_logits[p].size()),
        tol);
    EXPECT_EQ(res[0].generated, greedy);
    logits.push_back(res[0].prompt_logits);
  }
  return logits;
}

class Phi3LoraGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(Phi3LoraGolden, UnmergedAndMergedMatchPeft) {
  const std::string name = GetParam();
  const json ref = LoadJson(kDir + name + ".json");
  const std::string base = ref["base"];
  const bool bf16 = base.find("bf16") != std::string::npos;
  const float tol = test::GoldenTolerance(base);
  const size_t n = ref["prompts"].size();

  auto model = Model::Load(kModels + base);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  auto adapter = LoadFor(**model, name);
  ASSERT_TRUE(adapter.ok()) << adapter.status().ToString();
  // The fused projections are adapted as one module each, as PEFT wraps them.
  bool fused = false;
  for (const LoraWeights* lw : (*adapter)->modules()) {
    fused |= lw->module_path.ends_with("qkv_proj") || lw->module_path.ends_with("gate_up_proj");
  }
  EXPECT_TRUE(fused);
  const auto unmerged =
      ExpectRunsMatch(model->get(), *adapter, ref, "unmerged",
                      LoadRows(kDir + name + ".unmerged.safetensors", "prompt_", n), tol);
  // Proof the adapter is applied: it moves the logits far beyond the tolerance.
  const auto base_logits = test::LoadGolden(base).prompt_logits;
  float delta = 0;
  for (size_t p = 0; p < n && p < unmerged.size(); ++p) {
    if (unmerged[p].size() != base_logits[p].size()) continue;
    delta = std::max(
        delta, test::MaxAbsDiff(unmerged[p].data(), base_logits[p].data(), base_logits[p].size()));
  }
  EXPECT_GT(delta, 1000 * tol);

  const std::string merged_key = bf16 ? "merged_bf16" : "merged";
  auto merged_model = Model::Load(kModels + base);
  ASSERT_TRUE(merged_model.ok());
  ASSERT_TRUE((*merged_model)->MergeAdapter(**adapter).ok());
  const auto merged =
      ExpectRunsMatch(merged_model->get(), nullptr, ref, merged_key,
                      LoadRows(kDir + name + "." + merged_key + ".safetensors", "prompt_", n), tol);

  // `loom merge` writes the fused projections merged; the checkpoint loads as a Phi-3 again.
  const fs::path out = fs::temp_directory_path() / ("loom_merge_" + name);
  fs::remove_all(out);
  Status st = WriteMergedCheckpoint(kModels + base, **model, **adapter, out.string(), 100 * 1024);
  ASSERT_TRUE(st.ok()) << st.ToString();
  auto written = Model::Load(out.string());
  ASSERT_TRUE(written.ok()) << written.status().ToString();
  ExpectRunsMatch(written->get(), nullptr, ref, merged_key,
                  LoadRows(kDir + name + "." + merged_key + ".safetensors", "prompt_", n), tol);
  fs::remove_all(out);
}

INSTANTIATE_TEST_SUITE_P(Adapters, Phi3LoraGolden,
                         ::testing::Values("phi3_qkv_o_r8", "phi3_mlp_r4_f16", "phi4mini_all_bf16"),
                         [](const auto& info) { return info.param; });

// PEFT's adapter_names forward row by row, then the same requests continuously batched (chunked
// prefill, staggered arrivals) through their 32 greedy tokens, past the longrope switch.
TEST(Phi3LoraMixedBatch, MatchesPeftAdapterNamesForward) {
  const json ref = LoadJson(kDir + "mixed_phi3.json");
  const auto prompts = ref["prompts"].get<std::vector<std::vector<int32_t>>>();
  const auto names = ref["adapter_names"].get<std::vector<std::string>>();
  const auto rows = LoadRows(kDir + "mixed_phi3.safetensors", "row_", prompts.size());
  auto model = Model::Load(kModels + std::string(ref["base"]));
  ASSERT_TRUE(model.ok());
  EngineOptions options;
  options.max_batch_tokens = 9;
  Engine engine(model->get(), options);
  std::map<std::string, int> slots;
  for (const auto& [name, rel] : ref["adapters"].items()) {
    auto a = LoadFor(**model, name);
    ASSERT_TRUE(a.ok()) << a.status().ToString();
    slots[name] = engine.AddAdapter(*a);
  }
  std::vector<int64_t> ids;
  for (size_t p = 0; p < prompts.size(); ++p) {
    const int slot = names[p] == "__base__" ? -1 : slots.at(names[p]);
    auto id = engine.Add(Request(prompts[p], static_cast<int>(ref["greedy"][p].size()), slot));
    ASSERT_TRUE(id.ok());
    ids.push_back(*id);
    engine.Step();
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

}  // namespace
}  // namespace loom
