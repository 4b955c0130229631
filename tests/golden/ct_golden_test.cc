// Golden: pre-quantized compressed-tensors checkpoints (W8A8 int-quantized, W4A16 pack-quantized) — weights bit-exact with compressed-tensors' decompression, logits within the scheme's error of transformers, LoRA/DoRA vs PEFT and in mixed batches bitwise equal to alone.
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

// Tolerances, from each scheme, against transformers loading the same folder (compressed-tensors
// decompresses the weights exactly — checked bit for bit below; the reference computes in f32):
// - W8A8: the weights are identical on both sides; both quantize activations to int8 per token,
//   compressed-tensors with scale max|x|/127.5 over −128..127, loom with max|x|/127 over ±127,
//   so the two roundings of each activation are independent errors of up to half a step
//   (max|x|/254): the difference is of the size of int8's own activation error, about half of
//   --quantize int8's total. Measured: relative RMS logit error 1.8%, worst prompt logit 0.23.
// - W4A16: the weights are identical; loom's int4 kernel quantizes activations to int8 per row
//   (W4A8) where the reference keeps them f32: the same per-activation error (≤ max|x|/254).
//   Measured: 1.5–2.2% RMS, worst 0.17–0.29.
// Bounds for both: RMS ≤ 5%, worst ≤ 0.75 (~2.5× the measured; a weight defect — scale, nibble
// order, group — would add an error of int4's own weight-rounding size, 20–32% on these models,
// and WeightsEqualCompressedTensorsDecompression catches it bit for bit first). A greedy token can flip only where
// the reference's top-1 margin is below the sum of the two logits' errors (≤ 2 × worst), so
// tokens must agree where the margin exceeds 0.6 (W8A8: 0.5).
struct Case {
  const char* name;
  double relative_rms;
  float logit_tolerance;
  float clear_margin;  // greedy tokens must match where the reference's top-1 margin exceeds it
};
constexpr Case kCases[] = {
    {"ct_w8a8_llama", 0.05, 0.75f, 0.5f},
    {"ct_w4a16_qwen3", 0.05, 0.75f, 0.6f},
    {"ct_w4a16_qwen2", 0.05, 0.75f, 0.6f},
};

class CtGolden : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    case_ = &kCases[GetParam()];
    golden_ = test::LoadGolden(case_->name);
    auto m = Model::Load(golden_.model_dir);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    model_ = std::move(*m);
  }
  GenerationRequest Request(size_t p) const {
    GenerationRequest r;
    r.prompt = golden_.prompts[p];
    r.params.max_tokens = static_cast<int>(golden_.greedy[p].size());
    r.params.temperature = 0;
    r.params.ignore_eos = true;
    r.params.logprobs = 2;
    r.return_prompt_logits = true;
    return r;
  }
  const Case* case_ = nullptr;
  test::GoldenModel golden_;
  std::unique_ptr<Model> model_;
};

// loom's weights, dequantized, equal compressed-tensors' own decompression bit for bit.
TEST_P(CtGolden, WeightsEqualCompressedTensorsDecompression) {
  EXPECT_EQ(model_->prequantized(), "compressed-tensors");
  EXPECT_GT(model_->quantized_bytes(), 0u);
  auto store = SafetensorsStore::Open(kFixtures + "/golden/" + case_->name + ".dequant.safetensors");
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  ASSERT_EQ((*store)->names().size(), 3u);
  for (const std::string& name : (*store)->names()) {
    auto ref = (*store)->Get(name);
    ASSERT_TRUE(ref.ok());
    const Linear* lin = test::FindProjection(*model_, name);
    ASSERT_NE(lin, nullptr) << name;
    ASSERT_TRUE(lin->int8 || lin->int4) << name << " is not quantized";
    EXPECT_EQ(lin->weight.data, nullptr) << name << " kept a dense weight";
    const int64_t rows = ref->dim(0), cols = ref->dim(1);
    ASSERT_EQ(lin->out_features(), rows);
    ASSERT_EQ(lin->in_features(), cols);
    const float* r = static_cast<const float*>(ref->data);
    int64_t differ = 0;
    for (int64_t j = 0; j < rows; ++j) {
      for (int64_t i = 0; i < cols; ++i) {
        const float w = lin->int8 ? float(lin->int8->At(j, i)) * lin->int8->scale[static_cast<size_t>(j)]
                                  : lin->int4->Dequantized(j, i);
        differ += w != r[j * cols + i];
      }
    }
    EXPECT_EQ(differ, 0) << name << ": " << differ << " of " << rows * cols << " weights differ";
  }
  // The ignored head stays dense.
  EXPECT_FALSE(model_->weights().lm_head.int8 || model_->weights().lm_head.int4);
  EXPECT_NE(model_->weights().lm_head.weight.data, nullptr);
}

TEST_P(CtGolden, LogitsWithinTheSchemeErrorAndClearTokensKept) {
  test::LogitError error;
  int compared = 0;
  for (size_t p = 0; p < golden_.prompts.size(); ++p) {
    Engine engine(model_.get(), EngineOptions{});
    ASSERT_TRUE(engine.Add(Request(p)).ok());
    auto results = engine.RunToCompletion();
    ASSERT_EQ(results.size(), 1u);
    const GenerationResult& r = results[0];
    ASSERT_EQ(r.prompt_logits.size(), golden_.prompt_logits[p].size());
    error.Add(r.prompt_logits, golden_.prompt_logits[p]);
    // While the tokens agree the contexts are the same: every step whose reference margin is
    // clear must agree; the first disagreement at an unclear step ends the comparison.
    for (size_t s = 0; s < golden_.greedy[p].size(); ++s) {
      const auto& top = golden_.top_logprobs[p][s];
      const bool clear = top[0].second - top[1].second > case_->clear_margin;
      if (r.generated[s] != golden_.greedy[p][s]) {
        ASSERT_FALSE(clear) << "prompt " << p << " step " << s;
        break;
      }
      compared += clear;
    }
  }
  const double rms = error.RelativeRms();
  const float worst = error.worst;
  std::printf("%s: relative RMS logit error %.4f, worst prompt logit %.4f, %d clear greedy steps "
              "equal\n", case_->name, rms, worst, compared);
  EXPECT_LE(rms, case_->relative_rms);
  EXPECT_LE(worst, case_->logit_tolerance);
  EXPECT_GT(compared, 0);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CtGolden, ::testing::Values(0, 1, 2),
                         [](const auto& info) { return std::string(kCases[info.param].name); });

// LoRA adapters over a pre-quantized base: each changes the output, and a staggered mixed batch
// of base rows and adapters equals each request alone, bitwise (the serving kernels).
struct LoraCase {
  const char* base;
  std::vector<const char*> adapters;
};

class CtLora : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override { GlobalMatmulOptions().batch_invariant = true; }
  void TearDown() override { GlobalMatmulOptions().batch_invariant = false; }
};

TEST_P(CtLora, MixedBatchEqualsAlone) {
  static const LoraCase kLora[] = {
      {"ct_w8a8_llama", {"llama_qv_r8_f32", "llama_all_r4_f16", "llama_mlp_r6"}},
      {"ct_w4a16_qwen3", {"qwen3_lora_bias", "qwen3_dora"}},
      {"ct_w4a16_qwen2", {"qwen2_exclude", "qwen2_lmhead_tied"}},
  };
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
      model->get(), adapters, std::vector<std::string>(c.adapters.begin(), c.adapters.end()),
      golden.prompts);
}

constexpr const char* kLoraNames[] = {"w8a8_llama", "w4a16_qwen3", "w4a16_qwen2"};
INSTANTIATE_TEST_SUITE_P(Fixtures, CtLora, ::testing::Values(0, 1, 2),
                         [](const auto& info) { return std::string(kLoraNames[info.param]); });

// LoRA over a pre-quantized base against PEFT running the same adapter over transformers' model
// of the same folder: the adapter is f32 on both sides, so the difference is the base's
// activation rounding again — the same bounds as the base model's.
TEST(CtLoraVsPeft, UnmergedAndMergedWithinTheSchemeError) {
  struct Pair {
    const char* model;
    const char* adapter;
  };
  for (const Pair& c : {Pair{"ct_w8a8_llama", "llama_qv_r8_f32"}, Pair{"ct_w8a8_llama", "llama_mlp_r6"},
                        Pair{"ct_w4a16_qwen3", "qwen3_lora_bias"}, Pair{"ct_w4a16_qwen3", "qwen3_dora"},
                        Pair{"ct_w4a16_qwen2", "qwen2_exclude"}}) {
    SCOPED_TRACE(std::string(c.model) + " + " + c.adapter);
    auto ref = SafetensorsStore::Open(kFixtures + "/golden/" + c.model + ".lora.safetensors");
    ASSERT_TRUE(ref.ok()) << ref.status().ToString();
    const auto golden = test::LoadGolden(c.model);
    for (const bool merge : {false, true}) {
      auto model = Model::Load(kFixtures + "/models/" + c.model);
      ASSERT_TRUE(model.ok()) << model.status().ToString();
      auto adapter = LoadAdapter(c.adapter, kFixtures + "/adapters/" + c.adapter, (*model)->sites(), 0);
      ASSERT_TRUE(adapter.ok()) << adapter.status().ToString();
      // --merge: the adapted projections become dequantized f32 weights with the adapter folded in.
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
        // The adapter moved the reference further than loom's error: the comparison sees it.
        base_worst = std::max(base_worst, test::MaxAbsDiff(golden.prompt_logits[p].data(), e, n));
      }
      const double rms = error.RelativeRms();
      const float worst = error.worst;
      std::printf("%s + %s %s vs PEFT: relative RMS logit error %.4f, worst %.4f (adapter moves the "
                  "reference by up to %.4f)\n", c.model, c.adapter, merge ? "merged" : "unmerged",
                  rms, worst, base_worst);
      EXPECT_LE(rms, 0.05);
      EXPECT_LE(worst, 0.75f);
      EXPECT_GT(base_worst, 2 * worst);
    }
  }
}

// What a pre-quantized base refuses: --quantize (its projections are quantized already).
TEST(CtRejects, QuantizeAgain) {
  LoadOptions options;
  options.quantize = LoadOptions::Quantization::kInt8;
  auto requantized = Model::Load(kFixtures + "/models/ct_w4a16_qwen3", options);
  ASSERT_FALSE(requantized.ok());
  EXPECT_NE(requantized.status().message().find("--quantize on a pre-quantized"), std::string::npos);
}

}  // namespace
}  // namespace loom
