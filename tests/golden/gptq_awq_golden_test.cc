// Golden: pre-quantized GPTQ (v1 / gptq_v2, sym / asym, act order) and AWQ (GEMM) checkpoints — weights bit-exact with the formats' own dequantization, logits within W4A8's activation error of transformers, LoRA vs PEFT and mixed batches bitwise equal to alone.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "engine/engine.h"
#include "golden/golden_util.h"
#include "io/safetensors.h"
#include "lora/adapter.h"
#include "model/model.h"
#include "ops/matmul.h"

namespace loom {
namespace {

const std::string kFixtures = LOOM_FIXTURES;

// Tolerances. The reference is transformers (f32) with the projections replaced by the format's
// own dequantization (checked bit for bit below), so the weights are identical on both sides;
// loom's int4 kernels quantize activations to int8 per row (W4A8) where the reference keeps them
// f32: each activation's rounding error is ≤ max|x|/254 — the same error as the compressed-tensors
// W4A16 fixtures (ct_golden_test: measured 1.5–2.2% RMS, worst 0.17–0.29, bounds 5% / 0.75).
// Same bounds here; a format defect (nibble order, zero offset, g_idx) would add int4's own
// weight-rounding size error (20–30%) and is caught bit for bit first. Greedy tokens must agree
// where the reference's top-1 margin exceeds 0.6 (two logits' errors ≤ 2 × 0.3 measured worst).
struct Case {
  const char* name;
  const char* scheme;  // Model::prequantized()
};
constexpr Case kCases[] = {
    {"gptq_llama_g32_act", "GPTQ 4-bit, group 32, asym, act-order, v1"},
    {"gptq_qwen2_g128_sym", "GPTQ 4-bit, group 128, sym, v1"},
    {"gptq_llama_g64_v2", "GPTQ 4-bit, group 64, asym, gptq_v2"},
    {"awq_qwen2_g32", "AWQ (gemm) 4-bit, group 32, asym"},
    {"gptq_qwen3_g32_sym_act", "GPTQ 4-bit, group 32, sym, act-order, v1"},
    {"gptq_qwen3_moe_g32", "GPTQ 4-bit, group 32, sym, v1"},      // experts per expert, router dense
    {"gptq_mixtral_g32_act", "GPTQ 4-bit, group 32, asym, act-order, v1"},
    {"awq_qwen3_moe_g32", "AWQ (gemm) 4-bit, group 32, asym"},
};
constexpr double kRelativeRms = 0.05;
constexpr float kWorst = 0.75f, kClearMargin = 0.6f;

class GptqGolden : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    GlobalMatmulOptions().batch_invariant = true;  // the dense head too, for the batch check
    case_ = &kCases[GetParam()];
    golden_ = test::LoadGolden(case_->name);
    auto m = Model::Load(golden_.model_dir);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    model_ = std::move(*m);
  }
  void TearDown() override { GlobalMatmulOptions().batch_invariant = false; }
  const Case* case_ = nullptr;
  test::GoldenModel golden_;
  std::unique_ptr<Model> model_;
};

// loom's weights, dequantized (d·(u − z), file input order), equal the format's own unpack.
TEST_P(GptqGolden, WeightsEqualTheFormatsDequantization) {
  EXPECT_EQ(model_->prequantized(), case_->scheme);
  EXPECT_GT(model_->quantized_bytes(), 0u);
  auto store = SafetensorsStore::Open(kFixtures + "/golden/" + case_->name + ".dequant.safetensors");
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  ASSERT_EQ((*store)->names().size(), 3u);
  for (const std::string& name : (*store)->names()) {
    auto ref = (*store)->Get(name);
    ASSERT_TRUE(ref.ok());
    const Linear* lin = test::FindProjection(*model_, name);
    ASSERT_NE(lin, nullptr) << name;
    ASSERT_TRUE(lin->int4) << name << " is not quantized";
    EXPECT_EQ(lin->weight.data, nullptr) << name << " kept a dense weight";
    const int64_t rows = ref->dim(0), cols = ref->dim(1);
    ASSERT_EQ(lin->out_features(), rows);
    ASSERT_EQ(lin->in_features(), cols);
    const float* r = static_cast<const float*>(ref->data);
    int64_t differ = 0;
    for (int64_t j = 0; j < rows; ++j) {
      for (int64_t i = 0; i < cols; ++i) differ += lin->int4->Dequantized(j, i) != r[j * cols + i];
    }
    EXPECT_EQ(differ, 0) << name << ": " << differ << " of " << rows * cols << " weights differ";
  }
  const Linear* q = test::FindProjection(*model_, "model.layers.0.self_attn.q_proj");
  EXPECT_EQ(!q->int4->perm.empty(), std::string(case_->name).ends_with("_act")) << "act order";
  EXPECT_FALSE(model_->weights().lm_head.int4);
  for (const LayerWeights& l : model_->weights().layers) {  // MoE: every expert quantized, routers dense
    if (l.moe.experts.empty()) continue;
    EXPECT_FALSE(l.moe.router.int4) << l.moe.router.name;
    for (const ExpertWeights& x : l.moe.experts) {
      for (const Linear* lin : {&x.gate, &x.up, &x.down}) EXPECT_TRUE(lin->int4) << lin->name;
    }
  }
}

TEST_P(GptqGolden, LogitsWithinTheSchemeErrorClearTokensKeptBatchInvariant) {
  test::LogitError error;
  int compared = 0;
  std::vector<GenerationRequest> all;
  std::vector<GenerationResult> alone;
  for (size_t p = 0; p < golden_.prompts.size(); ++p) {
    GenerationRequest req;
    req.prompt = golden_.prompts[p];
    req.params.max_tokens = static_cast<int>(golden_.greedy[p].size());
    req.params.temperature = 0;
    req.params.ignore_eos = true;
    req.params.logprobs = 2;
    req.return_prompt_logits = true;
    all.push_back(req);
    Engine engine(model_.get(), EngineOptions{});
    ASSERT_TRUE(engine.Add(req).ok());
    auto results = engine.RunToCompletion();
    ASSERT_EQ(results.size(), 1u);
    const GenerationResult& r = results[0];
    ASSERT_EQ(r.prompt_logits.size(), golden_.prompt_logits[p].size());
    error.Add(r.prompt_logits, golden_.prompt_logits[p]);
    for (size_t s = 0; s < golden_.greedy[p].size(); ++s) {
      const auto& top = golden_.top_logprobs[p][s];
      const bool clear = top[0].second - top[1].second > kClearMargin;
      if (r.generated[s] != golden_.greedy[p][s]) {
        ASSERT_FALSE(clear) << "prompt " << p << " step " << s;
        break;
      }
      compared += clear;
    }
    alone.push_back(r);
  }
  const double rms = error.RelativeRms();
  std::printf("%s: relative RMS logit error %.4f, worst prompt logit %.4f, %d clear greedy steps equal\n",
              case_->name, rms, error.worst, compared);
  EXPECT_LE(rms, kRelativeRms);
  EXPECT_LE(error.worst, kWorst);
  EXPECT_GT(compared, 0);
  // Batch invariance: all prompts in one staggered batch give each request's bits alone.
  const std::vector<GenerationResult> batched = test::RunStaggered(model_.get(), all);
  ASSERT_EQ(batched.size(), alone.size());
  for (size_t p = 0; p < alone.size(); ++p) {
    EXPECT_EQ(batched[p].generated, alone[p].generated) << "prompt " << p;
    EXPECT_EQ(batched[p].prompt_logits, alone[p].prompt_logits) << "prompt " << p << " (bitwise)";
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, GptqGolden, ::testing::Range(0, static_cast<int>(std::size(kCases))),
                         [](const auto& info) { return std::string(kCases[info.param].name); });

struct LoraCase {
  const char* base;
  std::vector<const char*> adapters;
};
const LoraCase kLora[] = {
    {"gptq_llama_g32_act", {"llama_qv_r8_f32", "llama_all_r4_f16", "llama_mlp_r6"}},
    {"gptq_qwen2_g128_sym", {"qwen2_exclude", "qwen2_lmhead_tied"}},
    {"gptq_llama_g64_v2", {"llama_qv_r8_f32"}},
    {"awq_qwen2_g32", {"qwen2_exclude", "qwen2_lmhead_tied"}},
    {"gptq_qwen3_g32_sym_act", {"qwen3_dora", "qwen3_lora_bias"}},  // DoRA norms of dequantized rows
    // Mixture of experts: GPTQ experts (act order) and dense routers under attention adapters
    // (made for mixtral_bf16, whose attention shapes these share).
    {"gptq_mixtral_g32_act", {"qlora_nf4_mixtral", "qlora_int8_mixtral"}},
};

class GptqLora : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override { GlobalMatmulOptions().batch_invariant = true; }
  void TearDown() override { GlobalMatmulOptions().batch_invariant = false; }
};

TEST_P(GptqLora, MixedBatchEqualsAlone) {
  const LoraCase& c = kLora[GetParam()];
  auto model = Model::Load(kFixtures + "/models/" + c.base);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  std::vector<std::shared_ptr<const Adapter>> adapters;
  for (const char* name : c.adapters) {
    auto a = LoadAdapter(name, kFixtures + "/adapters/" + name, (*model)->sites(), 0);
    ASSERT_TRUE(a.ok()) << name << ": " << a.status().ToString();
    adapters.push_back(*a);
  }
  const auto golden = test::LoadGolden(c.base);
  test::ExpectAdaptersAppliedAndMixedBatchEqualsAlone(
      model->get(), adapters, std::vector<std::string>(c.adapters.begin(), c.adapters.end()), golden.prompts);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, GptqLora, ::testing::Range(0, static_cast<int>(std::size(kLora))),
                         [](const auto& info) { return std::string(kLora[info.param].base); });

// LoRA over a GPTQ/AWQ base vs PEFT over the dequantized transformers model: unmerged, and
// merged (--merge folds the adapter into the dequantized weight of the adapted projections only).
TEST(GptqLoraVsPeft, UnmergedAndMergedWithinTheSchemeError) {
  struct Pair {
    const char* model;
    const char* adapter;
  };
  for (const Pair& c : {Pair{"gptq_llama_g32_act", "llama_qv_r8_f32"}, Pair{"gptq_llama_g32_act", "llama_mlp_r6"},
                        Pair{"gptq_qwen2_g128_sym", "qwen2_exclude"}, Pair{"gptq_llama_g64_v2", "llama_qv_r8_f32"},
                        Pair{"awq_qwen2_g32", "qwen2_exclude"}, Pair{"gptq_qwen3_g32_sym_act", "qwen3_dora"},
                        Pair{"gptq_qwen3_g32_sym_act", "qwen3_lora_bias"}}) {
    SCOPED_TRACE(std::string(c.model) + " + " + c.adapter);
    auto ref = SafetensorsStore::Open(kFixtures + "/golden/" + c.model + ".lora.safetensors");
    ASSERT_TRUE(ref.ok()) << ref.status().ToString();
    const auto golden = test::LoadGolden(c.model);
    for (const bool merge : {false, true}) {
      auto model = Model::Load(kFixtures + "/models/" + c.model);
      ASSERT_TRUE(model.ok()) << model.status().ToString();
      auto adapter = LoadAdapter(c.adapter, kFixtures + "/adapters/" + c.adapter, (*model)->sites(), 0);
      ASSERT_TRUE(adapter.ok()) << adapter.status().ToString();
      if (merge) {
        ASSERT_TRUE((*model)->MergeAdapter(**adapter).ok());
      }
      test::LogitError error;
      float base_worst = 0;
      for (size_t p = 0; p < golden.prompts.size(); ++p) {
        auto expected = (*ref)->Get(std::string(c.adapter) + ".prompt_" + std::to_string(p));
        ASSERT_TRUE(expected.ok()) << expected.status().ToString();
        Engine engine(model->get(), EngineOptions{});
        if (!merge) engine.AddAdapter(*adapter);
        GenerationRequest r;
        r.prompt = golden.prompts[p];
        r.params.max_tokens = 1;
        r.params.temperature = 0;
        r.return_prompt_logits = true;
        r.adapter_slot = merge ? -1 : 0;
        ASSERT_TRUE(engine.Add(r).ok());
        const GenerationResult out = std::move(engine.RunToCompletion().at(0));
        const float* e = static_cast<const float*>(expected->data);
        const size_t n = static_cast<size_t>(expected->numel());
        ASSERT_EQ(out.prompt_logits.size(), n);
        error.Add(out.prompt_logits, std::vector<float>(e, e + n));
        base_worst = std::max(base_worst, test::MaxAbsDiff(golden.prompt_logits[p].data(), e, n));
      }
      std::printf("%s + %s %s vs PEFT: relative RMS logit error %.4f, worst %.4f (adapter moves the "
                  "reference by up to %.4f)\n", c.model, c.adapter, merge ? "merged" : "unmerged",
                  error.RelativeRms(), error.worst, base_worst);
      EXPECT_LE(error.RelativeRms(), kRelativeRms);
      EXPECT_LE(error.worst, kWorst);
      EXPECT_GT(base_worst, 2 * error.worst);
    }
  }
}

TEST(GptqRejects, QuantizeAgain) {
  LoadOptions options;
  options.quantize = LoadOptions::Quantization::kInt4;
  auto m = Model::Load(kFixtures + "/models/gptq_llama_g32_act", options);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("--quantize on a pre-quantized (GPTQ"), std::string::npos) << m.status().ToString();
}

}  // namespace
}  // namespace loom
