// Golden dump loader (JSON + safetensors written by tools/ref/make_models.py).
#include "golden/golden_util.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "base/mmap_file.h"
#include "io/safetensors.h"
#include "ops/matmul.h"

namespace loom::test {

namespace {
// The goldens are transformers in f32: every golden binary runs the exact hi+lo bf16 path
// (--exact-bf16), not the serving default that rounds activations once. Tests of the rounded
// path (bf16_serving_golden_test, FastBf16Golden) set it themselves and restore it.
class ExactBf16Environment : public ::testing::Environment {
 public:
  void SetUp() override { GlobalMatmulOptions().bf16_split = true; }
};
[[maybe_unused]] ::testing::Environment* const kExactBf16 =
    ::testing::AddGlobalTestEnvironment(new ExactBf16Environment);
}  // namespace

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

const Linear* FindProjection(const Model& m, const std::string& name) {
  const auto all = ProjectionsByName(m.weights());
  auto it = all.find(name);
  return it == all.end() ? nullptr : it->second;
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

std::vector<GenerationResult> RunStaggered(Model* model, const std::vector<GenerationRequest>& requests) {
  EngineOptions options;
  options.max_batch_tokens = 7;
  Engine engine(model, options);
  std::vector<int64_t> ids;
  std::vector<GenerationResult> done;
  for (const GenerationRequest& request : requests) {
    auto id = engine.Add(request);
    EXPECT_TRUE(id.ok()) << id.status().ToString();
    if (!id.ok()) return {};
    ids.push_back(*id);
    for (int s = 0; s < 3; ++s) engine.Step();  // the next request arrives mid-flight
    for (auto& r : engine.TakeFinished()) done.push_back(std::move(r));
  }
  for (auto& r : engine.RunToCompletion()) done.push_back(std::move(r));
  EXPECT_EQ(done.size(), requests.size());
  if (done.size() != requests.size()) return {};
  std::vector<GenerationResult> ordered(requests.size());
  for (auto& r : done) {
    const auto it = std::find(ids.begin(), ids.end(), r.id);
    EXPECT_NE(it, ids.end());
    if (it == ids.end()) return {};
    ordered[static_cast<size_t>(it - ids.begin())] = std::move(r);
  }
  return ordered;
}

float ExpectGoldenMatch(const GoldenModel& golden, const GenerationResult& r, size_t p, int vocab,
                        float tol, bool check_prompt) {
  SCOPED_TRACE("prompt " + std::to_string(p));
  float worst = 0;
  if (check_prompt) {
    const auto& ref_prompt = golden.prompt_logits[p];
    EXPECT_EQ(r.prompt_logits.size(), ref_prompt.size());
    if (r.prompt_logits.size() != ref_prompt.size()) return INFINITY;
    worst = MaxAbsDiff(r.prompt_logits.data(), ref_prompt.data(), ref_prompt.size());
    EXPECT_LE(worst, tol);
  }
  EXPECT_EQ(r.generated, golden.greedy[p]);
  // Step logits are comparable only while the tokens agree.
  const auto& ref_steps = golden.greedy_logits[p];
  EXPECT_EQ(r.step_logits.size(), ref_steps.size());
  if (r.step_logits.size() != ref_steps.size()) return INFINITY;
  for (size_t s = 0; s < golden.greedy[p].size() && s < r.generated.size(); ++s) {
    if (r.generated[s] != golden.greedy[p][s]) break;
    const size_t off = s * static_cast<size_t>(vocab);
    const float d = MaxAbsDiff(r.step_logits.data() + off, ref_steps.data() + off, static_cast<size_t>(vocab));
    worst = std::max(worst, d);
    EXPECT_LE(d, tol) << "step " << s;
    EXPECT_EQ(r.top_logprobs[s].size(), 5u);
    if (r.top_logprobs[s].size() != 5u) return INFINITY;
    for (size_t k = 0; k < 5; ++k) {
      EXPECT_EQ(r.top_logprobs[s][k].token, golden.top_logprobs[p][s][k].first)
          << "step " << s << " rank " << k;
      EXPECT_NEAR(r.top_logprobs[s][k].logprob, golden.top_logprobs[p][s][k].second, tol)
          << "step " << s << " rank " << k;
    }
  }
  return worst;
}

void LogitError::Add(const std::vector<float>& got, const std::vector<float>& ref) {
  EXPECT_EQ(got.size(), ref.size());
  const size_t n = std::min(got.size(), ref.size());
  worst = std::max(worst, MaxAbsDiff(got.data(), ref.data(), n));
  for (size_t i = 0; i < n; ++i) {
    err2 += double(got[i] - ref[i]) * (got[i] - ref[i]);
    ref2 += double(ref[i]) * ref[i];
  }
}

double LogitError::RelativeRms() const { return std::sqrt(err2 / ref2); }

namespace {
GenerationRequest AdapterRequest(const std::vector<int32_t>& prompt, int slot) {
  GenerationRequest r;
  r.prompt = prompt;
  r.params.temperature = 0;
  r.params.max_tokens = 10;
  r.params.ignore_eos = true;
  r.params.logprobs = 2;
  r.adapter_slot = slot;
  return r;
}
}  // namespace

void ExpectAdaptersAppliedAndMixedBatchEqualsAlone(
    Model* model, const std::vector<std::shared_ptr<const Adapter>>& adapters,
    const std::vector<std::string>& names, const std::vector<std::vector<int32_t>>& prompts) {
  const size_t kinds = adapters.size() + 1;
  auto slot = [&](size_t p) { return static_cast<int>(p % kinds) - 1; };
  std::vector<GenerationResult> alone;
  for (size_t p = 0; p < prompts.size(); ++p) {
    Engine engine(model, EngineOptions{});
    for (const auto& a : adapters) engine.AddAdapter(a);
    ASSERT_TRUE(engine.Add(AdapterRequest(prompts[p], slot(p))).ok());
    alone.push_back(std::move(engine.RunToCompletion().at(0)));
  }
  for (size_t p = 0; p < prompts.size(); ++p) {
    if (slot(p) < 0) continue;
    Engine engine(model, EngineOptions{});
    ASSERT_TRUE(engine.Add(AdapterRequest(prompts[p], -1)).ok());
    const GenerationResult base = std::move(engine.RunToCompletion().at(0));
    EXPECT_NE(base.top_logprobs.at(0).at(0).logprob, alone[p].top_logprobs.at(0).at(0).logprob)
        << "adapter " << names[static_cast<size_t>(slot(p))] << " had no effect on prompt " << p;
  }
  EngineOptions staggered;
  staggered.max_batch_tokens = 7;
  Engine engine(model, staggered);
  for (const auto& a : adapters) engine.AddAdapter(a);
  std::vector<int64_t> ids;
  for (size_t p = 0; p < prompts.size(); ++p) {
    auto id = engine.Add(AdapterRequest(prompts[p], slot(p)));
    ASSERT_TRUE(id.ok()) << id.status().ToString();
    ids.push_back(*id);
    engine.Step();
    engine.Step();
  }
  auto mixed = engine.RunToCompletion();
  for (auto& r : engine.TakeFinished()) mixed.push_back(std::move(r));
  ASSERT_EQ(mixed.size(), alone.size());
  for (const GenerationResult& r : mixed) {
    const size_t p = static_cast<size_t>(std::find(ids.begin(), ids.end(), r.id) - ids.begin());
    ASSERT_LT(p, alone.size());
    SCOPED_TRACE("prompt " + std::to_string(p));
    EXPECT_EQ(r.generated, alone[p].generated);
    ASSERT_EQ(r.top_logprobs.size(), alone[p].top_logprobs.size());
    for (size_t s = 0; s < r.top_logprobs.size(); ++s) {
      for (size_t k = 0; k < r.top_logprobs[s].size(); ++k) {
        EXPECT_EQ(r.top_logprobs[s][k].logprob, alone[p].top_logprobs[s][k].logprob) << "step " << s;
      }
    }
  }
}

}  // namespace loom::test
