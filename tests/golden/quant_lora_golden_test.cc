// Golden: LoRA and DoRA adapters over a base quantized at load (int8, int4) — each adapter still changes the output, and a mixed continuous batch of adapters and base rows equals each request alone, bitwise.
#include <gtest/gtest.h>

#include <algorithm>
#include <tuple>

#include "engine/engine.h"
#include "golden/golden_util.h"
#include "lora/adapter.h"
#include "model/model.h"
#include "ops/matmul.h"

namespace loom {
namespace {

const std::string kAdapters = std::string(LOOM_FIXTURES) + "/adapters/";
const std::string kModels = std::string(LOOM_FIXTURES) + "/models/";

struct Case {
  const char* base;
  std::vector<const char*> adapters;  // fixture adapter folders for that base
};

std::string CaseName(const std::tuple<int, int>& param) {
  const char* bases[] = {"qwen3", "llama"};
  const char* schemes[] = {"int8", "int4g128", "int4g32"};
  return std::string(bases[std::get<0>(param)]) + "_" + schemes[std::get<1>(param)];
}

// With the kernels `loom serve` uses (MatmulOptions::batch_invariant, on there by default).
class QuantLora : public ::testing::TestWithParam<std::tuple<int, int>> {
 protected:
  void SetUp() override { GlobalMatmulOptions().batch_invariant = true; }
  void TearDown() override { GlobalMatmulOptions().batch_invariant = false; }
};

TEST_P(QuantLora, AdaptersChangeTheOutputAndMixedBatchEqualsAlone) {
  static const Case kCases[] = {
      {"qwen3_f32", {"qwen3_dora", "qwen3_lora_bias"}},
      {"llama_f32", {"llama_qv_r8_f32", "llama_all_r4_f16", "llama_mlp_r6"}},
  };
  const Case& c = kCases[std::get<0>(GetParam())];
  LoadOptions options;
  options.quantize = std::get<1>(GetParam()) == 0 ? LoadOptions::Quantization::kInt8
                                                  : LoadOptions::Quantization::kInt4;
  options.quantize_group = std::get<1>(GetParam()) == 2 ? 32 : 128;
  options.quantize_head = true;
  auto model = Model::Load(kModels + c.base, options);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  std::vector<std::shared_ptr<const Adapter>> adapters;
  for (const char* name : c.adapters) {
    auto a = LoadAdapter(name, kAdapters + name, (*model)->sites(), 0);
    ASSERT_TRUE(a.ok()) << name << ": " << a.status().ToString();
    adapters.push_back(*a);
  }
  const auto golden = test::LoadGolden(c.base);
  test::ExpectAdaptersAppliedAndMixedBatchEqualsAlone(
      model->get(), adapters, std::vector<std::string>(c.adapters.begin(), c.adapters.end()),
      golden.prompts);
}

INSTANTIATE_TEST_SUITE_P(Schemes, QuantLora,
                         ::testing::Combine(::testing::Values(0, 1), ::testing::Values(0, 1, 2)),
                         [](const auto& info) { return CaseName(info.param); });

}  // namespace
}  // namespace loom
