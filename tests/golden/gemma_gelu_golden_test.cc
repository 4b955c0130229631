// Golden: a Gemma 2 model with hidden_activation "gelu" (the exact erf GELU in transformers 5.24)
// equals transformers, each prompt alone and continuously batched.
#include <gtest/gtest.h>

#include "engine/engine.h"
#include "golden/golden_util.h"
#include "model/model.h"

namespace loom {
namespace {

GenerationRequest Request(const test::GoldenModel& g, size_t p) {
  GenerationRequest r;
  r.prompt = g.prompts[p];
  r.params.max_tokens = static_cast<int>(g.greedy[p].size());
  r.params.temperature = 0;
  r.params.ignore_eos = true;
  r.params.logprobs = 5;
  r.return_prompt_logits = true;
  r.return_step_logits = true;
  return r;
}

TEST(GemmaGeluGolden, ErfGeluMatchesTransformers) {
  const std::string name = "gemma2_gelu_f32";
  const test::GoldenModel golden = test::LoadGolden(name);
  auto model = Model::Load(golden.model_dir);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  // The fixture also carries hidden_act "gelu_pytorch_tanh", which Gemma 2 never reads.
  ASSERT_EQ((*model)->config().activation, Activation::kGeluErf);
  const int vocab = (*model)->config().vocab_size;
  const float tol = test::GoldenTolerance(name);
  const test::GoldenModel tanh_golden = test::LoadGolden("gemma2_f32");  // same weights, tanh GELU
  float worst = 0, from_tanh = 0;
  for (size_t p = 0; p < golden.prompts.size(); ++p) {
    SCOPED_TRACE("prompt " + std::to_string(p));
    Engine engine(model->get(), EngineOptions{});
    ASSERT_TRUE(engine.Add(Request(golden, p)).ok());
    auto results = engine.RunToCompletion();
    ASSERT_EQ(results.size(), 1u);
    worst = std::max(worst, test::ExpectGoldenMatch(golden, results[0], p, vocab, tol));
    const auto& other = tanh_golden.prompt_logits[p];
    from_tanh = std::max(from_tanh, test::MaxAbsDiff(results[0].prompt_logits.data(), other.data(), other.size()));
  }
  RecordProperty("max_abs_diff", std::to_string(worst));
  EXPECT_GT(from_tanh, 10 * tol) << "the tanh-GELU model's logits are as close: the fixture tells nothing";

  std::vector<GenerationRequest> requests;
  for (size_t p = 0; p < golden.prompts.size(); ++p) requests.push_back(Request(golden, p));
  const auto batched = test::RunStaggered(model->get(), requests);
  ASSERT_EQ(batched.size(), golden.prompts.size());
  for (size_t p = 0; p < batched.size(); ++p) test::ExpectGoldenMatch(golden, batched[p], p, vocab, tol);
}

}  // namespace
}  // namespace loom
