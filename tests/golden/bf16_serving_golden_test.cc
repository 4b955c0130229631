// Golden: the serving default (bf16 activations rounded once, batch-invariant kernels, over the
// bf16 KV cache loom serve picks for a bf16 model, and over an f32 one) against transformers
// running the bf16 fixture models in bfloat16 (tools/ref/make_bf16_refs.py), whose cache is bf16.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "base/mmap_file.h"
#include "engine/engine.h"
#include "golden/golden_util.h"
#include "io/safetensors.h"
#include "model/model.h"
#include "ops/matmul.h"

namespace loom {
namespace {

// Tolerance. transformers in bf16 rounds about a dozen activations per layer to bf16 (norm
// outputs, q/k/v, scores, probabilities, attention output, residual stream, MLP intermediates;
// relative error ≤ 2⁻⁹ each) and the logits themselves (≤ 2⁻⁹·|logit|); loom rounds only the
// matmul inputs and accumulates in f32. The two differ by the sum of those roundings carried to
// the logits: a few 2⁻⁹·max|logit| per layer over these 3-4 layer models. Gemma's final
// soft-cap (l = cap·tanh(z/cap)) squeezes the logits but not the errors made before it, which
// scale with the pre-cap logits z (and tanh' ≤ 1 only shrinks them): the scale there is
// max|z| = cap·atanh(max|l|/cap). Bound: 20·2⁻⁹·scale (0.51 at max|logit| 13.125; 0.50 for
// gemma2, whose max|l| 4.94 under cap 5 is z 12.7). Measured worst, any ISA level (printed):
// 8.3·2⁻⁹ (0.22 at 13.75), gemma2 0.23. A real defect (a wrong weight, position or rounding
// mode) moves logits by O(scale). A bf16 KV cache rounds K and V as transformers in bf16 does
// (it stores them in bf16): the same bound holds.
constexpr float kRelTol = 20.0f / 512.0f;

struct Bf16Reference {
  std::vector<std::vector<int32_t>> prompts, greedy;
  std::vector<std::vector<float>> margins;
  std::vector<std::vector<float>> prompt_logits, greedy_logits;  // [p][len * vocab], [p][32 * vocab]
  float max_abs = 0;
};

std::vector<float> ReadBf16(SafetensorsStore& store, const std::string& name) {
  auto t = store.Get(name);
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  if (!t.ok()) return {};
  EXPECT_EQ(t->dtype, DType::kBF16) << name;
  std::vector<float> out(static_cast<size_t>(t->numel()));
  const auto* p = static_cast<const uint16_t*>(t->data);
  for (size_t i = 0; i < out.size(); ++i) out[i] = Bf16ToF32(p[i]);
  return out;
}

Bf16Reference LoadReference(const std::string& name) {
  const std::string dir = std::string(LOOM_FIXTURES) + "/golden_bf16/";
  Bf16Reference r;
  auto text = ReadTextFile(dir + name + ".json");
  EXPECT_TRUE(text.ok()) << dir << name << ".json";
  if (!text.ok()) return r;
  auto j = nlohmann::json::parse(*text);
  r.prompts = j["prompts"].get<std::vector<std::vector<int32_t>>>();
  r.greedy = j["greedy"].get<std::vector<std::vector<int32_t>>>();
  r.margins = j["margins"].get<std::vector<std::vector<float>>>();
  auto store = SafetensorsStore::Open(dir + name + ".logits.safetensors");
  EXPECT_TRUE(store.ok()) << store.status().ToString();
  if (!store.ok()) return r;
  for (size_t p = 0; p < r.prompts.size(); ++p) {
    r.prompt_logits.push_back(ReadBf16(**store, "prompt_" + std::to_string(p)));
    r.greedy_logits.push_back(ReadBf16(**store, "greedy_" + std::to_string(p)));
    for (float v : r.prompt_logits.back()) r.max_abs = std::max(r.max_abs, std::fabs(v));
    for (float v : r.greedy_logits.back()) r.max_abs = std::max(r.max_abs, std::fabs(v));
  }
  return r;
}

class Bf16ServingGolden : public ::testing::TestWithParam<std::tuple<std::string, KvDtype>> {
 protected:
  void SetUp() override {
    name_ = std::get<0>(GetParam());
    options_.kv_cache_dtype = std::get<1>(GetParam());
    ref_ = LoadReference(name_);
    ASSERT_EQ(ref_.prompts.size(), 4u);
    auto m = Model::Load(std::string(LOOM_FIXTURES) + "/models/" + name_);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    model_ = std::move(*m);
    vocab_ = model_->config().vocab_size;
    saved_ = GlobalMatmulOptions();
    GlobalMatmulOptions() = MatmulOptions{};  // the serving default: rounded once ...
    GlobalMatmulOptions().batch_invariant = true;  // ... through the kernels loom serve uses
    ASSERT_FALSE(GlobalMatmulOptions().bf16_split) << "single rounding is the default";
    const float cap = model_->config().final_softcap;
    scale_ = cap > 0 ? cap * std::atanh(std::min(ref_.max_abs / cap, 0.999f)) : ref_.max_abs;
    tol_ = kRelTol * scale_;
  }
  void TearDown() override { GlobalMatmulOptions() = saved_; }

  std::string name_;
  EngineOptions options_;
  Bf16Reference ref_;
  std::unique_ptr<Model> model_;
  MatmulOptions saved_;
  int vocab_ = 0;
  float scale_ = 0;  // max|logit| before any final soft-cap
  float tol_ = 0;
};

// Whether a reference step's top-1 is clear: with every logit within tol_, a margin above
// 2·tol_ fixes the argmax; at or below it the two may legitimately pick different tokens.
bool Clear(float margin, float tol) { return margin > 2 * tol; }

int ArgMax(const float* row, int vocab) {
  int best = 0;
  for (int v = 1; v < vocab; ++v) best = row[v] > row[best] ? v : best;
  return best;
}

// Teacher-forced prefill of prompt + the reference's 31 first greedy tokens (one request, so
// the rows go through the prefill kernels): every position's logits within tol_ of the
// reference, and loom's argmax equal to the reference's greedy token at every clear step.
TEST_P(Bf16ServingGolden, PrefillMatchesTransformersInBf16) {
  float worst = 0;
  int clear = 0;
  for (size_t p = 0; p < ref_.prompts.size(); ++p) {
    const size_t len = ref_.prompts[p].size(), steps = ref_.greedy[p].size();
    GenerationRequest r;
    r.prompt = ref_.prompts[p];
    r.prompt.insert(r.prompt.end(), ref_.greedy[p].begin(), ref_.greedy[p].end() - 1);
    r.params.max_tokens = 1;
    r.params.temperature = 0;
    r.return_prompt_logits = true;
    Engine engine(model_.get(), options_);
    ASSERT_TRUE(engine.Add(r).ok());
    const GenerationResult got = engine.RunToCompletion().at(0);
    ASSERT_EQ(got.prompt_logits.size(), (len + steps - 1) * static_cast<size_t>(vocab_));
    const auto& want = ref_.prompt_logits[p];
    worst = std::max(worst, test::MaxAbsDiff(got.prompt_logits.data(), want.data(), want.size()));
    for (size_t s = 0; s < steps; ++s) {
      const float* row = got.prompt_logits.data() + (len - 1 + s) * vocab_;
      worst = std::max(worst, test::MaxAbsDiff(row, ref_.greedy_logits[p].data() + s * vocab_, vocab_));
      if (!Clear(ref_.margins[p][s], tol_)) continue;
      EXPECT_EQ(ArgMax(row, vocab_), ref_.greedy[p][s]) << "prompt " << p << " step " << s
                                                        << " (reference margin " << ref_.margins[p][s] << ")";
      ++clear;
    }
  }
  std::printf(
      "%s (%s KV) prefill: tol %.4f (%.0f·2^-9 of max|pre-cap logit| %.3f); worst %.4f; "
      "%d clear steps\n",
      name_.c_str(), KvDtypeName(options_.kv_cache_dtype), tol_, kRelTol * 512, scale_, worst,
      clear);
  EXPECT_LE(worst, tol_);
  // Gemma's soft-capped fixtures have no reference margin above 2·tol (their largest is 0.6):
  // only the logit bound checks them. Every other model has 35+ clear steps.
  if (model_->config().final_softcap == 0) {
    EXPECT_GE(clear, 8) << "too few clear-margin steps: the greedy check is vacuous";
  }
}

// Free-running greedy decode (decode rows, batch-invariant kernels): tokens and step logits
// equal the reference's up to its first step whose margin is not clear.
TEST_P(Bf16ServingGolden, GreedyDecodeMatchesTransformersInBf16) {
  float worst = 0;
  int compared = 0;
  for (size_t p = 0; p < ref_.prompts.size(); ++p) {
    GenerationRequest r;
    r.prompt = ref_.prompts[p];
    r.params.max_tokens = static_cast<int>(ref_.greedy[p].size());
    r.params.temperature = 0;
    r.params.ignore_eos = true;
    r.return_step_logits = true;
    Engine engine(model_.get(), options_);
    ASSERT_TRUE(engine.Add(r).ok());
    const GenerationResult got = engine.RunToCompletion().at(0);
    ASSERT_EQ(got.generated.size(), ref_.greedy[p].size());
    for (size_t s = 0; s < ref_.greedy[p].size() && Clear(ref_.margins[p][s], tol_); ++s) {
      const float* row = got.step_logits.data() + s * static_cast<size_t>(vocab_);
      worst = std::max(worst, test::MaxAbsDiff(row, ref_.greedy_logits[p].data() + s * vocab_, vocab_));
      ASSERT_EQ(got.generated[s], ref_.greedy[p][s]) << "prompt " << p << " step " << s;
      ++compared;
    }
  }
  std::printf("%s (%s KV) decode: worst %.4f over %d steps before the first unclear margin\n",
              name_.c_str(), KvDtypeName(options_.kv_cache_dtype), worst, compared);
  EXPECT_LE(worst, tol_);
}

INSTANTIATE_TEST_SUITE_P(Bf16Models, Bf16ServingGolden,
                         ::testing::Combine(::testing::Values("llama_bf16", "mistral_bf16",
                                                              "qwen2_bf16", "qwen3_bf16",
                                                              "gemma2_bf16", "gemma3_bf16"),
                                            ::testing::Values(KvDtype::kBf16, KvDtype::kF32)),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_" +
                                  (std::get<1>(info.param) == KvDtype::kBf16 ? "bf16kv" : "f32kv");
                         });

}  // namespace
}  // namespace loom
