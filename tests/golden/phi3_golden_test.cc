// Golden: Phi3ForCausalLM (fused qkv/gate_up, longrope past the short context, partial rotary,
// tied) equals transformers alone, in a mixed continuous batch, and through the prefix cache.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "engine/engine.h"
#include "golden/golden_util.h"
#include "model/model.h"

namespace loom {
namespace {

class Phi3Golden : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    golden_ = test::LoadGolden(GetParam());
    auto m = Model::Load(golden_.model_dir);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    model_ = std::move(*m);
    vocab_ = model_->config().vocab_size;
    tol_ = test::GoldenTolerance(GetParam());
  }

  GenerationRequest Request(size_t p, bool prompt_logits = true) const {
    GenerationRequest r;
    r.prompt = golden_.prompts[p];
    r.params.max_tokens = static_cast<int>(golden_.greedy[p].size());
    r.params.temperature = 0;
    r.params.ignore_eos = true;
    r.params.logprobs = 5;
    r.return_prompt_logits = prompt_logits;
    r.return_step_logits = true;
    return r;
  }

  void ExpectMatches(const GenerationResult& r, size_t p, bool prompt_logits = true) {
    worst_ = std::max(worst_, test::ExpectGoldenMatch(golden_, r, p, vocab_, tol_, prompt_logits));
  }

  test::GoldenModel golden_;
  std::unique_ptr<Model> model_;
  int vocab_ = 0;
  float tol_ = 0;
  float worst_ = 0;  // largest logit difference seen (prompt and step logits)
};

TEST_P(Phi3Golden, ConfigHasEveryFeature) {
  const ModelConfig& c = model_->config();
  EXPECT_TRUE(c.fused_qkv);
  EXPECT_TRUE(c.fused_gate_up);
  EXPECT_EQ(c.rope.scaling, RopeScaling::kLongRope);
  EXPECT_EQ(model_->rope_switch_length(), 16);
  EXPECT_NEAR(c.rope.attention_factor, std::sqrt(1 + std::log(4.0) / std::log(16.0)), 1e-12);
  const bool phi4 = GetParam().starts_with("phi4mini");
  EXPECT_EQ(c.rope.rotary_dim, phi4 ? 12 : 16);
  EXPECT_EQ(c.tie_word_embeddings, phi4);
  EXPECT_EQ(c.layers[0].sliding_window, phi4 ? 0 : 12);
  // Every prompt + its continuation runs past the short context; prompt 2 starts past it.
  EXPECT_GT(golden_.prompts[2].size(), 16u);
}

TEST_P(Phi3Golden, EachPromptAloneMatchesTransformers) {
  for (size_t p = 0; p < golden_.prompts.size(); ++p) {
    Engine engine(model_.get(), EngineOptions{});
    ASSERT_TRUE(engine.Add(Request(p)).ok());
    auto results = engine.RunToCompletion();
    ASSERT_EQ(results.size(), 1u);
    ExpectMatches(results[0], p);
  }
  std::printf("%s: max |loom - transformers| logit %.3g (tolerance %.0e)\n", GetParam().c_str(),
              worst_, tol_);
}

// Prefill chunks of 7 rows: a 17-token prompt's first chunks already use the long factors
// (the sequence's length, not the chunk's end, picks them).
TEST_P(Phi3Golden, MixedContinuousBatchMatchesEachAlone) {
  std::vector<GenerationRequest> requests;
  for (size_t p = 0; p < golden_.prompts.size(); ++p) requests.push_back(Request(p));
  const auto results = test::RunStaggered(model_.get(), requests);
  ASSERT_EQ(results.size(), golden_.prompts.size());
  for (size_t p = 0; p < results.size(); ++p) ExpectMatches(results[p], p);
}

// The same prompts twice through one engine: the second run reuses cached prefix blocks, which
// must be those of its own factor set (short and long blocks are keyed apart).
TEST_P(Phi3Golden, PrefixCacheKeepsShortAndLongBlocksApart) {
  Engine engine(model_.get(), EngineOptions{});
  for (int round = 0; round < 2; ++round) {
    for (size_t p = 0; p < golden_.prompts.size(); ++p) {
      ASSERT_TRUE(engine.Add(Request(p, false)).ok());
      auto results = engine.RunToCompletion();
      ASSERT_EQ(results.size(), 1u);
      ExpectMatches(results[0], p, false);
    }
  }
}

// A 16-token prompt fills one prefix-cache block with the short factors; the 17-token prompt that
// starts with the same 16 tokens runs long from the start and must not reuse that block.
TEST_P(Phi3Golden, ShortBlockIsNotReusedByALongSequence) {
  Engine engine(model_.get(), EngineOptions{});
  GenerationRequest shorter = Request(2, false);
  ASSERT_EQ(shorter.prompt.size(), 17u);
  shorter.prompt.resize(16);
  shorter.params.max_tokens = 1;
  ASSERT_TRUE(engine.Add(shorter).ok());
  ASSERT_EQ(engine.RunToCompletion().size(), 1u);
  ASSERT_TRUE(engine.Add(Request(2, false)).ok());
  auto results = engine.RunToCompletion();
  ASSERT_EQ(results.size(), 1u);
  EXPECT_EQ(results[0].num_cached_prompt_tokens, 0);
  ExpectMatches(results[0], 2, false);
}

INSTANTIATE_TEST_SUITE_P(Phi3Models, Phi3Golden,
                         ::testing::Values("phi3_f32", "phi3_bf16", "phi4mini_f32",
                                           "phi4mini_bf16"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace loom
