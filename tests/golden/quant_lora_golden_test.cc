// Golden: LoRA and DoRA adapters over a base quantized at load (int8, int4) — each adapter still changes the output, and a mixed continuous batch of adapters and base rows equals each request alone, bitwise.
#include <gtest/gtest.h>

#include <algorithm>
#include <tuple>

#include "engine/engine.h"
#include "golden/golden_util.h"
#include "lora/adapter.h"
#include "model/model.h"
#include "ops/matmul.h"

namespace loom {
namespace {

const std::string kAdapters = std::string(LOOM_FIXTURES) + "/adapters/";
const std::string kModels = std::string(LOOM_FIXTURES) + "/models/";

struct Case {
  const char* base;
  std::vector<const char*> adapters;  // fixture adapter folders for that base
};

GenerationRequest Request(const std::vector<int32_t>& prompt, int slot) {
  GenerationRequest r;
  r.prompt = prompt;
  r.params.temperature = 0;
  r.params.max_tokens = 10;
  r.params.ignore_eos = true;
  r.params.logprobs = 2;
  r.adapter_slot = slot;
  return r;
}

std::string CaseName(const std::tuple<int, int>& param) {
  const char* bases[] = {"qwen3", "llama"};
  const char* schemes[] = {"int8", "int4g128", "int4g32"};
  return std::string(bases[std::get<0>(param)]) + "_" + schemes[std::get<1>(param)];
}

// With the kernels `loom serve` uses (MatmulOptions::batch_invariant, on there by default).
class QuantLora : public ::testing::TestWithParam<std::tuple<int, int>> {
 protected:
  void SetUp() override { GlobalMatmulOptions().batch_invariant = true; }
  void TearDown() override { GlobalMatmulOptions().batch_invariant = false; }
};

TEST_P(QuantLora, AdaptersChangeTheOutputAndMixedBatchEqualsAlone) {
  static const Case kCases[] = {
      {"qwen3_f32", {"qwen3_dora", "qwen3_lora_bias"}},
      {"llama_f32", {"llama_qv_r8_f32", "llama_all_r4_f16", "llama_mlp_r6"}},
  };
  const Case& c = kCases[std::get<0>(GetParam())];
  LoadOptions options;
  options.quantize = std::get<1>(GetParam()) == 0 ? LoadOptions::Quantization::kInt8
                                                  : LoadOptions::Quantization::kInt4;
  options.quantize_group = std::get<1>(GetParam()) == 2 ? 32 : 128;
  options.quantize_head = true;
  auto model = Model::Load(kModels + c.base, options);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  std::vector<std::shared_ptr<const Adapter>> adapters;
  for (const char* name : c.adapters) {
    auto a = LoadAdapter(name, kAdapters + name, (*model)->sites(), 0);
    ASSERT_TRUE(a.ok()) << name << ": " << a.status().ToString();
    adapters.push_back(*a);
  }
  const auto golden = test::LoadGolden(c.base);
  // Request p uses slot p % (adapters + 1) − 1: base rows and every adapter, interleaved.
  const size_t kinds = adapters.size() + 1;
  std::vector<GenerationResult> alone;
  for (size_t p = 0; p < golden.prompts.size(); ++p) {
    Engine engine(model->get(), EngineOptions{});
    for (const auto& a : adapters) engine.AddAdapter(a);
    ASSERT_TRUE(engine.Add(Request(golden.prompts[p], static_cast<int>(p % kinds) - 1)).ok());
    alone.push_back(std::move(engine.RunToCompletion().at(0)));
  }
  // Each adapter changes what the quantized base says for the same prompt.
  for (size_t p = 0; p < golden.prompts.size(); ++p) {
    if (p % kinds == 0) continue;
    Engine engine(model->get(), EngineOptions{});
    ASSERT_TRUE(engine.Add(Request(golden.prompts[p], -1)).ok());
    const GenerationResult base = std::move(engine.RunToCompletion().at(0));
    EXPECT_NE(base.top_logprobs.at(0).at(0).logprob, alone[p].top_logprobs.at(0).at(0).logprob)
        << "adapter " << c.adapters[p % kinds - 1] << " had no effect on prompt " << p;
  }
  EngineOptions staggered;
  staggered.max_batch_tokens = 7;
  Engine engine(model->get(), staggered);
  for (const auto& a : adapters) engine.AddAdapter(a);
  std::vector<int64_t> ids;
  for (size_t p = 0; p < golden.prompts.size(); ++p) {
    ids.push_back(*engine.Add(Request(golden.prompts[p], static_cast<int>(p % kinds) - 1)));
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

INSTANTIATE_TEST_SUITE_P(Schemes, QuantLora,
                         ::testing::Combine(::testing::Values(0, 1), ::testing::Values(0, 1, 2)),
                         [](const auto& info) { return CaseName(info.param); });

}  // namespace
}  // namespace loom
