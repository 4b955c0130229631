// Batch invariance: with MatmulOptions.batch_invariant, a request's tokens and log-probs are
// bit-identical alone and inside any mixed batch (other adapters, long prefills, decode rows),
// for f32 and bf16 weights and adapters of every dtype, over an f32 or a bf16 KV cache.
#include <gtest/gtest.h>

#include "engine/engine.h"
#include "lora/adapter.h"
#include "ops/matmul.h"

namespace loom {
namespace {

const std::string kModels = std::string(LOOM_FIXTURES) + "/models/";
const std::string kAdapters = std::string(LOOM_FIXTURES) + "/adapters/";

struct Case {
  const char* model;
  std::vector<const char*> adapters;
  KvDtype kv = KvDtype::kF32;  // bf16: what loom serve's --kv-cache-dtype auto picks for them
};

GenerationRequest Request(int i, std::shared_ptr<const Adapter> adapter) {
  GenerationRequest r;
  // Prompts of very different lengths: long ones are chunked over several steps while the
  // short ones decode.
  const int len = 3 + (i * 29) % 90;
  for (int t = 0; t < len; ++t) r.prompt.push_back(3 + (i * 53 + t * 17) % 250);
  r.params.temperature = 0;
  r.params.max_tokens = 12;
  r.params.ignore_eos = true;
  r.params.logprobs = 3;
  r.adapter = std::move(adapter);
  return r;
}

void ExpectInvariant(const Case& c) {
  GlobalMatmulOptions().batch_invariant = true;
  auto model = Model::Load(kModels + c.model);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  std::vector<std::shared_ptr<const Adapter>> adapters = {nullptr};
  for (const char* name : c.adapters) {
    auto a = LoadAdapter(name, kAdapters + name, (*model)->sites(), 0);
    ASSERT_TRUE(a.ok()) << a.status().ToString();
    adapters.push_back(*a);
  }
  std::vector<GenerationRequest> reqs;
  for (int i = 0; i < 12; ++i) reqs.push_back(Request(i, adapters[static_cast<size_t>(i) % adapters.size()]));
  EngineOptions mixed;
  mixed.max_batch_tokens = 64;  // chunked prefill next to decode rows
  mixed.enable_prefix_caching = false;
  mixed.kv_cache_dtype = c.kv;
  Engine together(model->get(), mixed);
  for (const auto& r : reqs) ASSERT_TRUE(together.Add(r).ok());
  auto results = together.RunToCompletion();
  ASSERT_EQ(results.size(), reqs.size());
  // The step histograms /metrics shows: every step counted once, every row once (a sequence
  // computes its prompt and each generated token but the last), adapters mixed in some step
  // and never more than there are.
  const StepCounts& sc = together.step_counts();
  int64_t rows = 0, steps = 0;
  for (const auto& got : results) {
    rows += static_cast<int64_t>(reqs[static_cast<size_t>(got.id)].prompt.size() +
                                 got.generated.size()) -
            1;
  }
  for (int64_t n : sc.sequences.counts) steps += n;
  EXPECT_EQ(steps, together.steps());
  EXPECT_EQ(sc.tokens.sum, static_cast<double>(rows));
  ASSERT_EQ(sc.adapters.bounds[c.adapters.size()], static_cast<double>(c.adapters.size()));
  int64_t mixed_steps = 0, too_many = 0;
  for (size_t b = 2; b < sc.adapters.counts.size(); ++b) {
    (b <= c.adapters.size() ? mixed_steps : too_many) += sc.adapters.counts[b];
  }
  EXPECT_EQ(too_many, 0);
  if (c.adapters.size() >= 2) {
    EXPECT_GT(mixed_steps, 0);
  }
  // Whatever the adapter count, the batch ran sequences together (base rows beside adapter rows
  // with one adapter: every other request is the base's).
  int64_t shared_steps = 0;
  // (sequences' bounds are 1, 2, 4, …: bucket 0 holds the steps of one sequence)
  for (size_t b = 1; b < sc.sequences.counts.size(); ++b) shared_steps += sc.sequences.counts[b];
  EXPECT_GT(shared_steps, 0) << c.model;
  // The solo runs read the bf16 weights repacked as AMX tiles, as loom serve packs them (a no-op
  // without AMX or bf16 weights): the bits must be those the batch got from row-major weights.
  ASSERT_TRUE((*model)->PackWeightsForAmx().ok());
  for (const auto& got : results) {
    EngineOptions solo;
    solo.kv_cache_dtype = c.kv;
    Engine alone(model->get(), solo);
    ASSERT_TRUE(alone.Add(reqs[static_cast<size_t>(got.id)]).ok());
    const GenerationResult want = alone.RunToCompletion().at(0);
    EXPECT_EQ(got.generated, want.generated) << c.model << " request " << got.id;
    ASSERT_EQ(want.top_logprobs.size(), 12u);  // max_tokens, each with its top 3 and chosen one
    ASSERT_EQ(got.top_logprobs.size(), want.top_logprobs.size());
    ASSERT_EQ(got.logprobs.size(), want.logprobs.size());
    for (size_t t = 0; t < want.top_logprobs.size(); ++t) {
      EXPECT_EQ(got.logprobs[t].token, want.logprobs[t].token);
      EXPECT_EQ(got.logprobs[t].logprob, want.logprobs[t].logprob)
          << c.model << " request " << got.id << " step " << t << " (chosen token)";
      ASSERT_EQ(want.top_logprobs[t].size(), 3u);
      ASSERT_EQ(got.top_logprobs[t].size(), 3u);
      for (size_t k = 0; k < want.top_logprobs[t].size(); ++k) {
        EXPECT_EQ(got.top_logprobs[t][k].token, want.top_logprobs[t][k].token);
        // Bitwise: exact float equality, not a tolerance.
        EXPECT_EQ(got.top_logprobs[t][k].logprob, want.top_logprobs[t][k].logprob)
            << c.model << " request " << got.id << " step " << t;
      }
    }
  }
  GlobalMatmulOptions().batch_invariant = false;
}

TEST(BatchInvariance, F32BaseWithF32F16Adapters) {
  ExpectInvariant({"llama_f32", {"llama_qv_r8_f32", "llama_mlp_r6", "llama_all_r4_f16"}});
}

TEST(BatchInvariance, Bf16BaseWithBf16DoraAdapter) {
  ExpectInvariant({"qwen3_bf16", {"qwen3_bf16_dora_bf16"}});
  ExpectInvariant({"qwen3_bf16", {"qwen3_bf16_dora_bf16"}, KvDtype::kBf16});
}

// q/k/v with biases: solo base rows take the one-pass q/k/v path (bias added after the block),
// the mixed batch the per-projection one.
TEST(BatchInvariance, Bf16BaseWithQkvBiasAndExcludedModules) {
  ExpectInvariant({"qwen2_bf16", {"qwen2_exclude"}});
  ExpectInvariant({"qwen2_bf16", {"qwen2_exclude"}, KvDtype::kBf16});
}

TEST(BatchInvariance, Bf16BaseWithRsloraAdapter) {
  ExpectInvariant({"llama_bf16", {"llama_bf16_rslora"}});
  ExpectInvariant({"llama_bf16", {"llama_bf16_rslora"}, KvDtype::kBf16});
}

}  // namespace
}  // namespace loom
