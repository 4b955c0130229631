// Engine: request validation, EOS from generation_config.json, KV-cache admission and reuse.
#include "engine/engine.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "lora/adapter.h"
#include "model/model.h"
#include "tokenizer/detokenizer.h"
#include "tokenizer/tokenizer.h"

namespace loom {
namespace {

namespace fs = std::filesystem;

std::string FixtureModel(const std::string& name) {
  return std::string(LOOM_FIXTURES) + "/models/" + name;
}

GenerationRequest Greedy(std::vector<int32_t> prompt, int max_tokens) {
  GenerationRequest r;
  r.prompt = std::move(prompt);
  r.params.temperature = 0;
  r.params.max_tokens = max_tokens;
  return r;
}

TEST(Engine, RejectsBadRequestsNamingTheProblem) {
  auto model = Model::Load(FixtureModel("llama_f32"));
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  EngineOptions options;
  options.kv_cache_tokens = 64;
  Engine engine(model->get(), options);
  auto empty = engine.Add(Greedy({}, 4));
  ASSERT_FALSE(empty.ok());
  EXPECT_NE(empty.status().message().find("empty"), std::string::npos);
  auto oov = engine.Add(Greedy({5, 256}, 4));
  ASSERT_FALSE(oov.ok());
  EXPECT_NE(oov.status().message().find("256"), std::string::npos);
  auto too_long = engine.Add(Greedy({5, 6}, 600));
  ASSERT_FALSE(too_long.ok());
  EXPECT_NE(too_long.status().message().find(
                "This model's maximum context length is 512 tokens and your request has 2 input "
                "tokens (600 > 512 - 2)"),
            std::string::npos)
      << too_long.status().message();
  auto cache = engine.Add(Greedy({5, 6}, 100));
  ASSERT_FALSE(cache.ok());
  EXPECT_EQ(cache.status().code(), StatusCode::kResourceExhausted);
  GenerationRequest bad_p = Greedy({5}, 4);
  bad_p.params.top_p = 2;
  EXPECT_FALSE(engine.Add(bad_p).ok());
  EXPECT_FALSE(engine.HasWork());
}

// Greedy tokens of llama_f32 for prompt {50,214,41,56,207} are 195 121 171 ...; making 171
// the EOS (through generation_config.json) must stop there with finish_reason stop. Without a
// tokenizer's eos_token (none here) every such EOS id is reported as the stop token, as vLLM
// (update_from_generation_config with eos_token_id None: stop_reason 171).
TEST(Engine, StopsAtEosFromGenerationConfig) {
  const fs::path dir = fs::temp_directory_path() / "loom_engine_eos";
  fs::remove_all(dir);
  fs::copy(FixtureModel("llama_f32"), dir);
  std::ofstream(dir / "generation_config.json") << R"({"bos_token_id": 1, "eos_token_id": [7, 171]})";
  auto model = Model::Load(dir.string());
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  Engine engine(model->get(), EngineOptions{});
  ASSERT_TRUE(engine.Add(Greedy({50, 214, 41, 56, 207}, 10)).ok());
  GenerationRequest ignore = Greedy({50, 214, 41, 56, 207}, 10);
  ignore.params.ignore_eos = true;
  ASSERT_TRUE(engine.Add(ignore).ok());
  auto results = engine.RunToCompletion();
  ASSERT_EQ(results.size(), 2u);
  std::sort(results.begin(), results.end(), [](auto& a, auto& b) { return a.id < b.id; });
  EXPECT_EQ(results[0].generated, (std::vector<int32_t>{195, 121, 171}));
  EXPECT_EQ(results[0].finish_reason, FinishReason::kStop);
  EXPECT_EQ(results[0].stop_token, 171);
  EXPECT_EQ(results[1].generated.size(), 10u);
  EXPECT_EQ(results[1].stop_token, -1);
  EXPECT_EQ(results[1].finish_reason, FinishReason::kLength);
  fs::remove_all(dir);
}

// A request that brings a detokenizer primed with its prompt (the server primes each prompt once,
// on its handler thread) is detokenized from a copy of it, not primed again on the engine
// thread: primed here with a prompt whose last id is a lone UTF-8 byte (so priming takes every
// prompt id, as vLLM), the text differs from the request's own prompt's priming and equals the
// copy's.
TEST(Engine, DetokenizesFromTheDetokenizerTheCallerPrimed) {
  auto model = Model::Load(FixtureModel("llama_f32"));
  ASSERT_TRUE(model.ok());
  auto tok = tokenizer::Tokenizer::FromFile(std::string(LOOM_FIXTURES) +
                                            "/tokenizers/gpt2/tokenizer.json");
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  int32_t lone = -1;  // GPT-2's ids below 256 are its byte tokens: one is a lone high byte
  for (int32_t id = 0; id < 256 && lone < 0; ++id) {
    const int32_t one[] = {id};
    if ((*tok)->Decode(one, false) == "\xEF\xBF\xBD") lone = id;
  }
  ASSERT_GE(lone, 0);
  const std::vector<int32_t> plain = {40, 41, 42, 43, 44, 45, 46};
  std::vector<int32_t> ragged = plain;
  ragged.push_back(lone);
  auto primed = std::make_shared<tokenizer::StreamingDetokenizer>(tok->get(), true);
  primed->Prime(ragged);
  Engine engine(model->get(), EngineOptions{}, tok->get());
  GenerationRequest r = Greedy(plain, 8);
  r.params.ignore_eos = true;
  r.detokenize = true;
  r.primed = primed;
  ASSERT_TRUE(engine.Add(r).ok());
  auto results = engine.RunToCompletion();
  ASSERT_EQ(results.size(), 1u);
  auto stream = [&](tokenizer::StreamingDetokenizer d) {
    std::string text;
    for (int32_t id : results[0].generated) text += d.Add(id);
    return text + d.Finish();
  };
  tokenizer::StreamingDetokenizer own(tok->get(), true);
  own.Prime(plain);
  const std::string from_copy = stream(*primed);
  ASSERT_NE(from_copy, stream(own)) << "the two primings should give different text here";
  EXPECT_EQ(results[0].text, from_copy);
}

// More requests than the cache holds at once: they wait, then reuse freed blocks, and the
// outputs equal the same requests run one by one.
TEST(Engine, QueuesWhenCacheIsFullAndReusesBlocks) {
  auto model = Model::Load(FixtureModel("qwen3_bf16"));
  ASSERT_TRUE(model.ok());
  std::vector<std::vector<int32_t>> alone;
  for (int i = 0; i < 5; ++i) {
    Engine e(model->get(), EngineOptions{});
    ASSERT_TRUE(e.Add(Greedy({10 + i, 20, 30 + i}, 12)).ok());
    alone.push_back(e.RunToCompletion().at(0).generated);
  }
  EngineOptions tight;
  tight.kv_cache_tokens = 32;  // two 16-token blocks: one sequence (3 + 12 tokens) at a time
  Engine engine(model->get(), tight);
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(engine.Add(Greedy({10 + i, 20, 30 + i}, 12)).ok());
  auto results = engine.RunToCompletion();
  ASSERT_EQ(results.size(), 5u);
  for (const auto& r : results) EXPECT_EQ(r.generated, alone[static_cast<size_t>(r.id)]);
  EXPECT_EQ(engine.kv_cache().num_free_blocks(), engine.kv_cache().num_blocks());
}

// Two adapter objects with one identity (the same folder loaded twice, as two names or a reload
// beside the running old copy) are one segment of a step, as the scheduler counts them against
// --max-loras; each sequence's tokens are those it gets alone.
TEST(Engine, AdaptersOfOneIdentityShareAStepSegment) {
  auto model = Model::Load(FixtureModel("llama_f32"));
  ASSERT_TRUE(model.ok());
  const std::string dir = std::string(LOOM_FIXTURES) + "/adapters/llama_qv_r8_f32";
  auto a = LoadAdapter("a", dir, (*model)->sites(), 0);
  auto b = LoadAdapter("b", dir, (*model)->sites(), 0);
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_NE(a->get(), b->get());
  ASSERT_EQ((*a)->cache_identity(), (*b)->cache_identity());
  auto with = [](GenerationRequest r, const std::shared_ptr<const Adapter>& ad) {
    r.adapter = ad;
    return r;
  };
  std::vector<int32_t> alone;
  {
    Engine e(model->get(), EngineOptions{});
    ASSERT_TRUE(e.Add(with(Greedy({11, 12, 13}, 6), *b)).ok());
    alone = e.RunToCompletion().at(0).generated;
  }
  Engine engine(model->get(), EngineOptions{});
  ASSERT_TRUE(engine.Add(with(Greedy({5, 6, 7}, 6), *a)).ok());
  ASSERT_TRUE(engine.Add(with(Greedy({11, 12, 13}, 6), *b)).ok());
  auto results = engine.RunToCompletion();
  ASSERT_EQ(results.size(), 2u);
  std::sort(results.begin(), results.end(), [](const auto& x, const auto& y) { return x.id < y.id; });
  EXPECT_EQ(results[1].generated, alone);
  // The two ran in the same steps (else "one segment" would hold trivially).
  EXPECT_GT(engine.step_counts().sequences.counts[1], 0);  // bounds 1, 2, 4: bucket 1 holds 2
  const auto& h = engine.step_counts().adapters;  // bounds 0, 1, 2, …: bucket i counts i adapters
  EXPECT_GT(h.counts[1], 0);
  EXPECT_EQ(h.counts[2], 0) << "a step ran the two copies as two segments";
}

}  // namespace
}  // namespace loom
