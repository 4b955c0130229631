// Golden: loom's mixture-of-experts models (Qwen3-MoE, Mixtral) give transformers' logits, greedy
// tokens and log-probs, each prompt alone and all prompts in one continuously batched run.
#include <gtest/gtest.h>

#include "engine/engine.h"
#include "golden/golden_util.h"
#include "model/model.h"

namespace loom {
namespace {

using test::GoldenModel;

class MoeGolden : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    golden_ = test::LoadGolden(GetParam());
    auto m = Model::Load(golden_.model_dir);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    model_ = std::move(*m);
    vocab_ = model_->config().vocab_size;
    tol_ = test::GoldenTolerance(GetParam());
  }

  GenerationRequest Request(size_t p) const {
    GenerationRequest r;
    r.prompt = golden_.prompts[p];
    r.params.max_tokens = static_cast<int>(golden_.greedy[p].size());
    r.params.temperature = 0;
    r.params.ignore_eos = true;
    r.params.logprobs = 5;
    r.return_prompt_logits = true;
    r.return_step_logits = true;
    return r;
  }

  // Compares one finished request with the reference for prompt p.
  void ExpectMatches(const GenerationResult& r, size_t p) {
    worst_ = std::max(worst_, test::ExpectGoldenMatch(golden_, r, p, vocab_, tol_));
  }

  void TearDown() override { RecordProperty("max_abs_logit_diff", std::to_string(worst_)); }

  GoldenModel golden_;
  std::unique_ptr<Model> model_;
  float worst_ = 0;  // largest |loom − transformers| over the logits compared
  int vocab_ = 0;
  float tol_ = 0;
};

TEST_P(MoeGolden, EachPromptAloneMatchesTransformers) {
  const Activation want = GetParam().find("gelu_tanh") != std::string::npos ? Activation::kGeluTanh
                          : GetParam().find("gelu") != std::string::npos    ? Activation::kGeluErf
                                                                            : Activation::kSilu;
  ASSERT_EQ(model_->config().activation, want);
  for (size_t p = 0; p < golden_.prompts.size(); ++p) {
    Engine engine(model_.get(), EngineOptions{});
    ASSERT_TRUE(engine.Add(Request(p)).ok());
    auto results = engine.RunToCompletion();
    ASSERT_EQ(results.size(), 1u);
    ExpectMatches(results[0], p);
  }
}

// All prompts in one engine, arriving at different steps, with a small row budget so that
// prefill chunks and decode rows of different sequences share steps.
TEST_P(MoeGolden, MixedContinuousBatchMatchesEachAlone) {
  std::vector<GenerationRequest> requests;
  for (size_t p = 0; p < golden_.prompts.size(); ++p) requests.push_back(Request(p));
  const auto results = test::RunStaggered(model_.get(), requests);
  ASSERT_EQ(results.size(), golden_.prompts.size());
  for (size_t p = 0; p < results.size(); ++p) ExpectMatches(results[p], p);
}

// tools/ref/make_models_moe.py: 8 experts top-2 with a dense mlp_only layer (Qwen3-MoE), 4
// experts top-2 with a sliding window (Mixtral); router top-k margins ≥ 3e-4 on every row (≥ 1e-4
// for the GELU variants). mixtral_gelu_f32 (hidden_act "gelu", the erf GELU) and
// qwen3_moe_gelu_tanh_f32 ("gelu_pytorch_tanh"): transformers' experts apply the config's
// activation, and loom's ran SiLU whatever it said.
INSTANTIATE_TEST_SUITE_P(MoeModels, MoeGolden,
                         ::testing::Values("qwen3_moe_f32", "qwen3_moe_bf16", "mixtral_f32",
                                           "mixtral_bf16", "mixtral_gelu_f32",
                                           "qwen3_moe_gelu_tanh_f32"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace loom
