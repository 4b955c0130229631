// Golden: `loom quantize` → serving the written compressed-tensors folder gives the same bits (tokens, prompt logits, log-probs) as `--quantize` on the original, for int8 and int4, head dense or quantized, tied, sharded, fused and Gemma models.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "golden/golden_util.h"
#include "io/safetensors.h"
#include "model/ct_checkpoint.h"
#include "model/model.h"

namespace loom {
namespace {

namespace fs = std::filesystem;

struct Case {
  const char* model;
  LoadOptions::Quantization scheme;
  int group;
  bool head;
  uint64_t max_shard_bytes;
};

// Fixtures are 64 wide, so int4 uses groups of 32 (128 does not divide 64: refused, see
// ct_quantize_test). qwen2: tied embeddings with the head quantized (written untied); mistral:
// sharded input, and sharded output through a small shard size; phi3: fused qkv/gate_up.
constexpr Case kCases[] = {
    {"llama_bf16", LoadOptions::Quantization::kInt8, 128, false, 2ull << 30},
    {"qwen3_bf16", LoadOptions::Quantization::kInt8, 128, true, 2ull << 30},
    {"qwen2_bf16", LoadOptions::Quantization::kInt4, 32, true, 2ull << 30},
    {"qwen2_f32", LoadOptions::Quantization::kInt8, 128, false, 2ull << 30},
    {"mistral_bf16", LoadOptions::Quantization::kInt4, 32, false, 64 << 10},
    {"phi3_bf16", LoadOptions::Quantization::kInt8, 128, true, 2ull << 30},
    {"gemma2_bf16", LoadOptions::Quantization::kInt4, 32, true, 2ull << 30},
};

class CtQuantizeGolden : public ::testing::TestWithParam<int> {};

std::vector<GenerationResult> RunPrompts(Model* model, const test::GoldenModel& golden) {
  std::vector<GenerationRequest> requests;
  for (const auto& prompt : golden.prompts) {
    GenerationRequest r;
    r.prompt = prompt;
    r.params.max_tokens = 12;
    r.params.temperature = 0;
    r.params.ignore_eos = true;
    r.params.logprobs = 5;
    r.return_prompt_logits = true;
    requests.push_back(std::move(r));
  }
  return test::RunStaggered(model, requests);
}

TEST_P(CtQuantizeGolden, ServingTheWrittenFolderEqualsQuantizeAtLoadBitwise) {
  const Case& c = kCases[GetParam()];
  SCOPED_TRACE(c.model);
  const test::GoldenModel golden = test::LoadGolden(c.model);
  QuantizeCheckpointOptions o;
  o.scheme = c.scheme;
  o.group = c.group;
  o.quantize_head = c.head;
  o.max_shard_bytes = c.max_shard_bytes;
  char tmpl[] = "/tmp/loom_ct_quantize_XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string out = std::string(tmpl) + "/q";
  Status st = WriteQuantizedCheckpoint(golden.model_dir, o, out);
  ASSERT_TRUE(st.ok()) << st.ToString();

  LoadOptions at_load;
  at_load.quantize = c.scheme;
  at_load.quantize_group = c.group;
  at_load.quantize_head = c.head;
  auto reference = Model::Load(golden.model_dir, at_load);
  ASSERT_TRUE(reference.ok()) << reference.status().ToString();
  auto written = Model::Load(out);
  ASSERT_TRUE(written.ok()) << written.status().ToString();
  EXPECT_EQ((*written)->prequantized(), "compressed-tensors");
  EXPECT_EQ((*written)->quantized_bytes(), (*reference)->quantized_bytes());
  EXPECT_GT((*written)->quantized_bytes(), 0u);
  if (c.max_shard_bytes < (1u << 20)) {
    EXPECT_TRUE(fs::exists(out + "/model.safetensors.index.json"));
  }

  const std::vector<GenerationResult> want = RunPrompts(reference->get(), golden);
  const std::vector<GenerationResult> got = RunPrompts(written->get(), golden);
  ASSERT_EQ(got.size(), want.size());
  for (size_t p = 0; p < want.size(); ++p) {
    SCOPED_TRACE("prompt " + std::to_string(p));
    EXPECT_EQ(got[p].generated, want[p].generated);
    ASSERT_EQ(got[p].prompt_logits.size(), want[p].prompt_logits.size());
    EXPECT_EQ(std::memcmp(got[p].prompt_logits.data(), want[p].prompt_logits.data(),
                          want[p].prompt_logits.size() * sizeof(float)), 0)
        << "prompt logits differ, largest difference "
        << test::MaxAbsDiff(got[p].prompt_logits.data(), want[p].prompt_logits.data(),
                            want[p].prompt_logits.size());
    ASSERT_EQ(got[p].top_logprobs.size(), want[p].top_logprobs.size());
    for (size_t s = 0; s < want[p].top_logprobs.size(); ++s) {
      ASSERT_EQ(got[p].top_logprobs[s].size(), want[p].top_logprobs[s].size());
      for (size_t k = 0; k < want[p].top_logprobs[s].size(); ++k) {
        EXPECT_EQ(got[p].top_logprobs[s][k].token, want[p].top_logprobs[s][k].token);
        EXPECT_EQ(std::memcmp(&got[p].top_logprobs[s][k].logprob, &want[p].top_logprobs[s][k].logprob,
                              sizeof(float)), 0);
      }
    }
  }
  // And the quantized model differs from the dense one (the test would pass on a no-op).
  auto dense = Model::Load(golden.model_dir);
  ASSERT_TRUE(dense.ok());
  const std::vector<GenerationResult> base = RunPrompts(dense->get(), golden);
  EXPECT_NE(std::memcmp(base[0].prompt_logits.data(), got[0].prompt_logits.data(),
                        base[0].prompt_logits.size() * sizeof(float)), 0);
  std::error_code ec;
  fs::remove_all(tmpl, ec);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CtQuantizeGolden, ::testing::Range(0, static_cast<int>(std::size(kCases))),
                         [](const ::testing::TestParamInfo<int>& i) {
                           const Case& c = kCases[i.param];
                           std::string n = std::string(c.model) + "_" +
                                           (c.scheme == LoadOptions::Quantization::kInt8 ? "int8" : "int4g" + std::to_string(c.group)) +
                                           (c.head ? "_head" : "");
                           return n;
                         });

}  // namespace
}  // namespace loom
