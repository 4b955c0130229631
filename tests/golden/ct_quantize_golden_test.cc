// Golden: `loom quantize` → serving the written compressed-tensors folder gives the same bits (tokens, prompt logits, log-probs) as `--quantize` on the original, for int8 and int4, head dense or quantized, tied, sharded, fused, Gemma and mixture-of-experts models, and int4 groups --group-size does not divide.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <map>

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
  const char* prompts_of = nullptr;  // a model without goldens: another fixture's prompts
};

// Fixtures are 64 wide. qwen2: tied embeddings with the head quantized (written untied); mistral:
// sharded input, and sharded output through a small shard size; phi3: fused qkv/gate_up. Groups
// of 128 (Int4GroupFor): qwen3's 128-input o_proj/down_proj keep 128, its 64-input projections
// take 64 (config groups of their own); qwen3_moe: the dense MLP's 96-input down_proj takes 32.
// The routers stay dense. The fixtures' experts are 24 and 48 wide: with 64-wide gate/up inputs
// no group of 32 divides both widths, so int4 leaves all of their experts dense (`ignore`;
// mixtral: int8 experts). The *_w64 models (tools/ref/make_moe_w64.py, no goldens) have 64-wide experts: int4
// experts in "Linear"'s group of 32, or, with groups of 128, in a "re:" config group of 64.
constexpr Case kCases[] = {
    {"llama_bf16", LoadOptions::Quantization::kInt8, 128, false, 2ull << 30},
    {"qwen3_bf16", LoadOptions::Quantization::kInt8, 128, true, 2ull << 30},
    {"qwen2_bf16", LoadOptions::Quantization::kInt4, 32, true, 2ull << 30},
    {"qwen2_f32", LoadOptions::Quantization::kInt8, 128, false, 2ull << 30},
    {"mistral_bf16", LoadOptions::Quantization::kInt4, 32, false, 64 << 10},
    {"phi3_bf16", LoadOptions::Quantization::kInt8, 128, true, 2ull << 30},
    {"gemma2_bf16", LoadOptions::Quantization::kInt4, 32, true, 2ull << 30},
    {"qwen3_bf16", LoadOptions::Quantization::kInt4, 128, false, 2ull << 30},
    {"qwen3_moe_bf16", LoadOptions::Quantization::kInt4, 128, true, 2ull << 30},
    {"mixtral_bf16", LoadOptions::Quantization::kInt8, 128, false, 2ull << 30},
    {"mixtral_f32", LoadOptions::Quantization::kInt4, 32, false, 2ull << 30},
    {"qwen3_moe_w64_bf16", LoadOptions::Quantization::kInt4, 32, false, 2ull << 30, "qwen3_moe_bf16"},
    {"qwen3_moe_w64_bf16", LoadOptions::Quantization::kInt4, 128, true, 2ull << 30, "qwen3_moe_bf16"},
    {"mixtral_w64_bf16", LoadOptions::Quantization::kInt4, 128, false, 64 << 10, "mixtral_bf16"},
};

// Every projection's scheme in `m`: "int8", "int4 g<group>" or "dense", by name.
std::map<std::string, std::string> Schemes(const Model& m) {
  std::map<std::string, std::string> out;
  for (const auto& [name, lin] : ProjectionsByName(m.weights())) {
    out[name] = lin->int8 ? "int8" : lin->int4 ? "int4 g" + std::to_string(lin->int4->group) : "dense";
  }
  return out;
}

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
  test::GoldenModel golden = test::LoadGolden(c.prompts_of ? c.prompts_of : c.model);
  golden.model_dir = std::string(LOOM_FIXTURES) + "/models/" + c.model;
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
  // Each projection has the same scheme and group in both, and the routers stay dense.
  const auto schemes = Schemes(**reference);
  EXPECT_EQ(Schemes(**written), schemes);
  for (const LayerWeights& l : (*written)->weights().layers) {
    if (l.moe.experts.empty()) continue;
    EXPECT_EQ(schemes.at(l.moe.router.name), "dense") << l.moe.router.name;
    // Experts: one scheme for all of a layer's (transformers and vLLM read one per block).
    const std::string expert = schemes.at(l.moe.experts[0].gate.name);
    for (const ExpertWeights& x : l.moe.experts) {
      for (const Linear* lin : {&x.gate, &x.up, &x.down}) EXPECT_EQ(schemes.at(lin->name), expert) << lin->name;
    }
    const bool w64 = std::string(c.model).find("w64") != std::string::npos;
    if (c.scheme == LoadOptions::Quantization::kInt8) {
      EXPECT_EQ(expert, "int8");
    }
    if (c.scheme == LoadOptions::Quantization::kInt4) {
      EXPECT_EQ(expert, !w64 ? "dense" : c.group == 32 ? "int4 g32" : "int4 g64") << c.model;
    }
  }
  if (c.scheme == LoadOptions::Quantization::kInt4 && c.group == 128 &&
      std::string(c.model) == "qwen3_bf16") {
    EXPECT_EQ(schemes.at("model.layers.0.self_attn.o_proj"), "int4 g128");
    EXPECT_EQ(schemes.at("model.layers.0.self_attn.q_proj"), "int4 g64");
  }
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
