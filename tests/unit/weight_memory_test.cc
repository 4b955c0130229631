// `loom inspect` memory: each weight's scheme and bytes for dense, --quantize int8/int4 and compressed-tensors models, totals, and the CLI's JSON keys.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "adversarial_util.h"
#include "model/weight_memory.h"

namespace loom {
namespace {

using namespace loom::testing;

const WeightMemory* Find(const std::vector<WeightMemory>& w, const std::string& name) {
  for (const auto& m : w) {
    if (m.name == name) return &m;
  }
  return nullptr;
}

TEST(WeightMemory, DenseModelListsEveryTensorWithItsFileBytes) {
  auto m = Model::Load(kFixtures + "/models/llama_bf16");
  ASSERT_TRUE(m.ok());
  const auto w = DescribeWeightMemory(**m);
  const WeightMemory* q = Find(w, "model.layers.0.self_attn.q_proj");
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->scheme, "BF16");
  EXPECT_EQ(q->bytes, 64u * 64u * 2u);
  ASSERT_NE(Find(w, "model.norm.weight"), nullptr);
  EXPECT_EQ(Find(w, "lm_head")->scheme, "BF16");
  const auto sums = SumWeightMemory(w);
  EXPECT_EQ(sums.at("total").second, (*m)->weight_bytes());  // every byte of the files, once
  EXPECT_EQ(sums.size(), 2u);                                // BF16 and total
}

TEST(WeightMemory, QuantizeAtLoadShowsInt8AndInt4Groups) {
  LoadOptions o;
  o.quantize = LoadOptions::Quantization::kInt8;
  auto m8 = Model::Load(kFixtures + "/models/llama_bf16", o);
  ASSERT_TRUE(m8.ok());
  const auto w8 = DescribeWeightMemory(**m8);
  EXPECT_EQ(Find(w8, "model.layers.2.mlp.down_proj")->scheme, "int8 per-channel");
  EXPECT_EQ(Find(w8, "lm_head")->scheme, "BF16");  // head not quantized without quantize_head
  EXPECT_EQ(SumWeightMemory(w8).at("int8 per-channel").second, (*m8)->quantized_bytes());
  EXPECT_EQ(SumWeightMemory(w8).at("int8 per-channel").first, 21);  // 3 layers × 7

  o.quantize = LoadOptions::Quantization::kInt4;
  o.quantize_group = 32;
  o.quantize_head = true;
  auto m4 = Model::Load(kFixtures + "/models/qwen2_bf16", o);  // tied: the head is a quantized copy
  ASSERT_TRUE(m4.ok());
  const auto w4 = DescribeWeightMemory(**m4);
  EXPECT_EQ(Find(w4, "lm_head")->scheme, "int4 g32");
  EXPECT_EQ(Find(w4, "model.layers.0.self_attn.q_proj.bias")->scheme, "BF16");
  EXPECT_EQ(SumWeightMemory(w4).at("int4 g32").second, (*m4)->quantized_bytes());

  auto tied = Model::Load(kFixtures + "/models/qwen2_bf16");
  ASSERT_TRUE(tied.ok());
  const auto wt = DescribeWeightMemory(**tied);
  EXPECT_EQ(Find(wt, "lm_head")->scheme, "tied to model.embed_tokens.weight");
  EXPECT_EQ(Find(wt, "lm_head")->bytes, 0u);
}

TEST(WeightMemory, CompressedTensorsCheckpointsNameTheirScheme) {
  auto m = Model::Load(kFixtures + "/models/ct_w4a16_qwen3");
  ASSERT_TRUE(m.ok());
  const auto w = DescribeWeightMemory(**m);
  EXPECT_EQ(Find(w, "model.layers.0.self_attn.q_proj")->scheme, "compressed-tensors W4A16 (int4 g32)");
  EXPECT_EQ(Find(w, "model.layers.0.self_attn.o_proj")->scheme, "compressed-tensors W4A16 (int4 g128)");
  EXPECT_EQ(Find(w, "model.layers.0.self_attn.q_proj.weight_packed"), nullptr);  // not listed apart
  auto m8 = Model::Load(kFixtures + "/models/ct_w8a8_llama");
  ASSERT_TRUE(m8.ok());
  EXPECT_EQ(Find(DescribeWeightMemory(**m8), "model.layers.1.mlp.up_proj")->scheme,
            "compressed-tensors W8A8 (int8 per-channel)");
}

// bitsandbytes and GPTQ projections are listed once, under their format, with the bytes loom
// holds (not the shape as f32, and no separate absmax / quant_state / qweight rows).
TEST(WeightMemory, BitsandbytesAndGptqCheckpointsNameTheirScheme) {
  for (const char* name : {"nf4_llama", "fp4dq_mistral"}) {
    auto m = Model::Load(kFixtures + "/models/" + name);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    const auto w = DescribeWeightMemory(**m);
    const WeightMemory* q = Find(w, "model.layers.0.self_attn.q_proj");
    ASSERT_NE(q, nullptr) << name;
    const std::string type = std::string(name).substr(0, 3);
    EXPECT_EQ(q->scheme, "bitsandbytes " + type + " (block 64)");
    // 64 × 64 weights: 4 bits each, one f32 absmax per 64.
    EXPECT_EQ(q->bytes, 64u * 64u / 2u + 64u * 4u);
    for (const WeightMemory& m : w) {
      EXPECT_EQ(m.name.find(".weight."), std::string::npos) << name << ": " << m.name;
    }
  }
  // A 4-bit projection's bias stays a row of its own (qwen2's q/k/v biases).
  auto b = Model::Load(kFixtures + "/models/nf4dq_qwen2");
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  const auto wb = DescribeWeightMemory(**b);
  ASSERT_NE(Find(wb, "model.layers.0.self_attn.q_proj.bias"), nullptr);
  EXPECT_EQ(Find(wb, "model.layers.0.self_attn.q_proj.bias")->bytes, 64u * 4u);
  EXPECT_EQ(Find(wb, "model.layers.0.self_attn.q_proj")->scheme, "bitsandbytes nf4 (block 64)");
  auto i8 = Model::Load(kFixtures + "/models/int8_llama");
  ASSERT_TRUE(i8.ok()) << i8.status().ToString();
  EXPECT_EQ(Find(DescribeWeightMemory(**i8), "model.layers.0.mlp.up_proj")->scheme,
            "bitsandbytes LLM.int8 (int8 per-channel)");
  auto g = Model::Load(kFixtures + "/models/gptq_qwen2_g128_sym");
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  const auto w = DescribeWeightMemory(**g);
  EXPECT_EQ(Find(w, "model.layers.0.mlp.down_proj")->scheme,
            "GPTQ 4-bit, group 128, sym, v1 (int4 g128)");
  EXPECT_EQ(Find(w, "model.layers.0.mlp.down_proj.qweight"), nullptr);
}

TEST(WeightMemory, InspectCliKeepsItsKeysAndAddsWeightsAndMemory) {
  const RunResult r = RunLoom("--quantize int8 inspect --model " + kFixtures + "/models/llama_bf16");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto j = nlohmann::json::parse(r.output.substr(r.output.find('{')));
  for (const char* key : {"model", "architecture", "layers", "model_dim", "vocab_size", "weight_bytes",
                          "weights", "memory"}) {
    EXPECT_TRUE(j.contains(key)) << key;
  }
  EXPECT_EQ(j["memory"]["int8 per-channel"]["tensors"], 21);
  EXPECT_GT(j["memory"]["total"]["bytes"].get<uint64_t>(), 0u);
}

}  // namespace
}  // namespace loom
