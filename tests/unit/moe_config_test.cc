// Tests of the mixture-of-experts config.json fields (Qwen3-MoE, Mixtral) and their reject paths.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "base/file.h"
#include "model/config.h"

namespace loom {
namespace {

using json = nlohmann::json;

const std::string kModels = std::string(LOOM_FIXTURES) + "/models";
const char kWhere[] = "test/config.json";

// Qwen3-30B-A3B's config.json as the Hub has it (transformers 4 spelling), layers cut to 4.
json Qwen3MoeHub() {
  return json::parse(R"({
    "architectures": ["Qwen3MoeForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
    "bos_token_id": 151643, "decoder_sparse_step": 1, "eos_token_id": 151645, "head_dim": 128,
    "hidden_act": "silu", "hidden_size": 2048, "initializer_range": 0.02,
    "intermediate_size": 6144, "max_position_embeddings": 40960, "max_window_layers": 48,
    "mlp_only_layers": [], "model_type": "qwen3_moe", "moe_intermediate_size": 768,
    "norm_topk_prob": true, "num_attention_heads": 32, "num_experts": 128,
    "num_experts_per_tok": 8, "num_hidden_layers": 4, "num_key_value_heads": 4,
    "output_router_logits": false, "rms_norm_eps": 1e-06, "rope_scaling": null,
    "rope_theta": 1000000.0, "router_aux_loss_coef": 0.001, "sliding_window": null,
    "tie_word_embeddings": false, "torch_dtype": "bfloat16", "use_cache": true,
    "use_sliding_window": false, "vocab_size": 151936})");
}

StatusOr<ModelConfig> Parse(const json& j) { return ParseModelConfig(j.dump(), "", kWhere); }

TEST(MoeConfigTest, Qwen3MoeFixtureHasOneDenseLayer) {
  auto c = LoadModelConfig(kModels + "/qwen3_moe_f32");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->moe.num_experts, 8);  // written as num_local_experts by transformers 5
  EXPECT_EQ(c->moe.top_k, 2);
  EXPECT_EQ(c->moe.expert_ffn_dim, 24);
  EXPECT_FALSE(c->moe.norm_topk);
  EXPECT_EQ(c->moe.block, "mlp");
  EXPECT_TRUE(c->qk_norm);
  ASSERT_EQ(c->layers.size(), 3u);
  EXPECT_TRUE(c->layers[0].moe);
  EXPECT_FALSE(c->layers[1].moe);  // mlp_only_layers [1]
  EXPECT_TRUE(c->layers[2].moe);
}

TEST(MoeConfigTest, MixtralFixture) {
  auto c = LoadModelConfig(kModels + "/mixtral_bf16");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->moe.num_experts, 4);
  EXPECT_EQ(c->moe.expert_ffn_dim, 48);
  EXPECT_TRUE(c->moe.norm_topk);
  EXPECT_EQ(c->moe.block, "block_sparse_moe");
  EXPECT_EQ(c->moe.gate, "w1");
  EXPECT_EQ(c->moe.up, "w3");
  EXPECT_EQ(c->moe.down, "w2");
  for (const auto& l : c->layers) {
    EXPECT_TRUE(l.moe);
    EXPECT_EQ(l.sliding_window, 8);
  }
}

TEST(MoeConfigTest, Qwen3MoeHubConfig) {
  auto c = Parse(Qwen3MoeHub());
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->moe.num_experts, 128);
  EXPECT_EQ(c->moe.top_k, 8);
  EXPECT_TRUE(c->moe.norm_topk);
  for (const auto& l : c->layers) {
    EXPECT_TRUE(l.moe);
    EXPECT_EQ(l.sliding_window, 0);
  }
}

TEST(MoeConfigTest, DecoderSparseStepAndWindow) {
  json j = Qwen3MoeHub();
  j["decoder_sparse_step"] = 2;
  j["use_sliding_window"] = true;
  j["sliding_window"] = 64;
  auto c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_FALSE(c->layers[0].moe);  // (i + 1) % 2 == 0 → sparse
  EXPECT_TRUE(c->layers[1].moe);
  EXPECT_FALSE(c->layers[2].moe);
  EXPECT_TRUE(c->layers[3].moe);
  for (const auto& l : c->layers) EXPECT_EQ(l.sliding_window, 64);  // every layer, as HF 5
}

TEST(MoeConfigTest, RejectsNamingTheField) {
  struct Case {
    const char* key;
    json value;
    const char* want;
  };
  const Case cases[] = {
      {"shared_expert_intermediate_size", 512, "shared_expert_intermediate_size"},
      {"num_experts_per_tok", 129, "num_experts_per_tok"},
      {"num_experts_per_tok", 0, "num_experts_per_tok"},
      {"num_experts", 1 << 20, "num_experts"},
      {"mlp_only_layers", json::array({4}), "mlp_only_layers"},
      {"mlp_only_layers", "all", "mlp_only_layers"},
      {"decoder_sparse_step", 0, "decoder_sparse_step"},
      {"moe_intermediate_size", 0, "moe_intermediate_size"},
      {"layer_types", json::array({"sliding_attention"}), "layer_types"},
  };
  for (const Case& k : cases) {
    json j = Qwen3MoeHub();
    j[k.key] = k.value;
    auto c = Parse(j);
    ASSERT_FALSE(c.ok()) << k.key;
    EXPECT_NE(c.status().message().find(k.want), std::string::npos) << c.status().ToString();
  }
  {  // each within its cap, the product not: 1024 layers × 4096 experts
    json big = Qwen3MoeHub();
    big["num_hidden_layers"] = 1024;
    big["num_experts"] = 4096;
    auto c = Parse(big);
    ASSERT_FALSE(c.ok());
    EXPECT_NE(c.status().message().find("num_hidden_layers (1024) × num_experts (4096) is above the maximum"),
              std::string::npos) << c.status().ToString();
  }
  json j = Qwen3MoeHub();
  j.erase("moe_intermediate_size");
  auto c = Parse(j);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("moe_intermediate_size"), std::string::npos);
}

TEST(MoeConfigTest, MixtralWithoutExpertsIsRejected) {
  json j = json::parse(ReadFileBounded(kModels + "/mixtral_f32/config.json", 1 << 20).value());
  j["num_local_experts"] = 0;
  auto c = Parse(j);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("num_local_experts"), std::string::npos);
}

}  // namespace
}  // namespace loom
