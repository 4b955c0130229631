// Gemma 2 / Gemma 3 config.json parsing: published configs, both RoPE forms, every reject path.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <string>

#include "model/config.h"

namespace loom {
namespace {

using json = nlohmann::json;
const char kWhere[] = "gemma/config.json";

// Published config.json of google/gemma-2-2b (values as on the hub).
const char kGemma2_2b[] = R"({
  "architectures": ["Gemma2ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "attn_logit_softcapping": 50.0, "bos_token_id": 2, "cache_implementation": "hybrid",
  "eos_token_id": [1, 107], "final_logit_softcapping": 30.0, "head_dim": 256,
  "hidden_act": "gelu_pytorch_tanh", "hidden_activation": "gelu_pytorch_tanh",
  "hidden_size": 2304, "initializer_range": 0.02, "intermediate_size": 9216,
  "max_position_embeddings": 8192, "model_type": "gemma2", "num_attention_heads": 8,
  "num_hidden_layers": 26, "num_key_value_heads": 4, "pad_token_id": 0,
  "query_pre_attn_scalar": 256, "rms_norm_eps": 1e-06, "rope_theta": 10000.0,
  "sliding_window": 4096, "torch_dtype": "float32", "transformers_version": "4.42.4",
  "use_cache": true, "vocab_size": 256000})";

// Published config.json of google/gemma-3-270m (transformers 4 form: rope_theta,
// rope_local_base_freq, layer_types).
const char kGemma3_270m[] = R"({
  "_sliding_window_pattern": 6, "architectures": ["Gemma3ForCausalLM"],
  "attention_bias": false, "attention_dropout": 0.0, "attn_logit_softcapping": null,
  "bos_token_id": 2, "eos_token_id": 1, "final_logit_softcapping": null, "head_dim": 256,
  "hidden_activation": "gelu_pytorch_tanh", "hidden_size": 640, "initializer_range": 0.02,
  "intermediate_size": 2048,
  "layer_types": ["sliding_attention", "sliding_attention", "sliding_attention",
    "sliding_attention", "sliding_attention", "full_attention", "sliding_attention",
    "sliding_attention", "sliding_attention", "sliding_attention", "sliding_attention",
    "full_attention", "sliding_attention", "sliding_attention", "sliding_attention",
    "sliding_attention", "sliding_attention", "full_attention"],
  "max_position_embeddings": 32768, "model_type": "gemma3_text", "num_attention_heads": 4,
  "num_hidden_layers": 18, "num_key_value_heads": 1, "pad_token_id": 0,
  "query_pre_attn_scalar": 256, "rms_norm_eps": 1e-06, "rope_local_base_freq": 10000.0,
  "rope_scaling": null, "rope_theta": 1000000.0, "sliding_window": 512,
  "torch_dtype": "bfloat16", "transformers_version": "4.55.0.dev0",
  "use_bidirectional_attention": false, "use_cache": true, "vocab_size": 262144})";

StatusOr<ModelConfig> Parse(const json& j) { return ParseModelConfig(j.dump(), "", kWhere); }

void ExpectRejected(const json& j, const std::vector<std::string>& needles) {
  auto c = Parse(j);
  ASSERT_FALSE(c.ok()) << j.dump();
  for (const auto& n : needles) {
    EXPECT_NE(c.status().message().find(n), std::string::npos)
        << "'" << n << "' not in: " << c.status().message();
  }
  EXPECT_NE(c.status().message().find(kWhere), std::string::npos);
}

TEST(GemmaConfigTest, Gemma2_2b) {
  auto c = Parse(json::parse(kGemma2_2b));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->activation, Activation::kGeluTanh);
  EXPECT_TRUE(c->sandwich_norm);
  EXPECT_FALSE(c->qk_norm);
  EXPECT_TRUE(c->tie_word_embeddings);  // Gemma2Config default
  EXPECT_EQ(c->head_dim, 256);
  EXPECT_FLOAT_EQ(c->attn_scale, 1.0f / 16);
  EXPECT_FLOAT_EQ(c->attn_softcap, 50.0f);
  EXPECT_FLOAT_EQ(c->final_softcap, 30.0f);
  EXPECT_FLOAT_EQ(c->embed_scale, std::sqrt(2304.0f));
  EXPECT_DOUBLE_EQ(c->rope.theta, 10000.0);
  for (int i = 0; i < c->num_layers; ++i) {  // even layers slide
    EXPECT_EQ(c->layers[static_cast<size_t>(i)].sliding_window, i % 2 == 0 ? 4096 : 0) << i;
    EXPECT_FALSE(c->layers[static_cast<size_t>(i)].local_rope);
  }
}

TEST(GemmaConfigTest, Gemma3_270mLegacyRopeForm) {
  auto c = Parse(json::parse(kGemma3_270m));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_TRUE(c->qk_norm);
  EXPECT_EQ(c->num_kv_heads, 1);
  EXPECT_FLOAT_EQ(c->attn_softcap, 0.0f);
  EXPECT_FLOAT_EQ(c->final_softcap, 0.0f);
  EXPECT_DOUBLE_EQ(c->rope.theta, 1e6);
  EXPECT_DOUBLE_EQ(c->rope_local.theta, 1e4);
  EXPECT_EQ(c->rope.scaling, RopeScaling::kNone);
  for (int i = 0; i < c->num_layers; ++i) {
    const bool global = (i + 1) % 6 == 0;
    EXPECT_EQ(c->layers[static_cast<size_t>(i)].sliding_window, global ? 0 : 512) << i;
    EXPECT_EQ(c->layers[static_cast<size_t>(i)].local_rope, !global) << i;
  }
}

TEST(GemmaConfigTest, Gemma3RopeParametersPerLayerTypeAndScaling) {
  json j = json::parse(kGemma3_270m);
  j.erase("rope_theta");
  j.erase("rope_local_base_freq");
  j.erase("layer_types");
  j["sliding_window_pattern"] = 3;
  j["rope_parameters"] = {
      {"full_attention", {{"rope_type", "linear"}, {"factor", 8.0}, {"rope_theta", 5e5}}},
      {"sliding_attention", {{"rope_type", "default"}, {"rope_theta", 2e4}}}};
  auto c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_DOUBLE_EQ(c->rope.theta, 5e5);
  EXPECT_EQ(c->rope.scaling, RopeScaling::kLinear);
  EXPECT_DOUBLE_EQ(c->rope.factor, 8.0);
  EXPECT_DOUBLE_EQ(c->rope_local.theta, 2e4);
  EXPECT_EQ(c->rope_local.scaling, RopeScaling::kNone);
  for (int i = 0; i < c->num_layers; ++i) {  // no layer_types: every 3rd layer is global
    EXPECT_EQ(c->layers[static_cast<size_t>(i)].sliding_window, (i + 1) % 3 == 0 ? 0 : 512) << i;
  }
  // Legacy rope_scaling applies to the global layers only.
  json legacy = json::parse(kGemma3_270m);
  legacy["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 8.0}};
  auto l = Parse(legacy);
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  EXPECT_EQ(l->rope.scaling, RopeScaling::kLinear);
  EXPECT_EQ(l->rope_local.scaling, RopeScaling::kNone);
}

TEST(GemmaConfigTest, TransformersDefaultsWhenFieldsAreAbsent) {
  json j = json::parse(kGemma2_2b);
  for (const char* k : {"head_dim", "num_key_value_heads", "attn_logit_softcapping",
                        "final_logit_softcapping", "query_pre_attn_scalar", "sliding_window",
                        "hidden_activation", "hidden_act"}) {
    j.erase(k);
  }
  auto c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->head_dim, 256);
  EXPECT_EQ(c->num_kv_heads, 4);
  EXPECT_FLOAT_EQ(c->attn_softcap, 50.0f);
  EXPECT_FLOAT_EQ(c->final_softcap, 30.0f);
  EXPECT_FLOAT_EQ(c->attn_scale, 1.0f / 16);
  EXPECT_EQ(c->layers[0].sliding_window, 4096);
  EXPECT_EQ(c->activation, Activation::kGeluTanh);
  j["attn_logit_softcapping"] = nullptr;  // explicit null: off
  EXPECT_FLOAT_EQ(Parse(j)->attn_softcap, 0.0f);
  // The head_dim default holds whatever hidden_size / heads would give: 2304 is not a multiple
  // of 7 heads, and transformers still loads it with head_dim 256 (review finding: refused).
  j["num_attention_heads"] = 7;
  j["num_key_value_heads"] = 7;
  auto odd = Parse(j);
  ASSERT_TRUE(odd.ok()) << odd.status().ToString();
  EXPECT_EQ(odd->head_dim, 256);
}

// transformers 5.24's Gemma2/Gemma3 MLP is ACT2FN[config.hidden_activation]: "gelu" is the exact
// erf GELU (no legacy remap to tanh there; only GemmaConfig, Gemma 1, has one), and hidden_act is
// never read, whatever it holds.
TEST(GemmaConfigTest, HiddenActivationGeluIsTheErfGeluAndHiddenActIsIgnored) {
  for (const char* base : {kGemma2_2b, kGemma3_270m}) {
    json j = json::parse(base);
    j["hidden_activation"] = "gelu";
    j["hidden_act"] = "gelu_pytorch_tanh";
    auto c = Parse(j);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    EXPECT_EQ(c->activation, Activation::kGeluErf);
    j["hidden_activation"] = "gelu_pytorch_tanh";
    j["hidden_act"] = "relu";  // not an activation loom has; Gemma never reads it
    c = Parse(j);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    EXPECT_EQ(c->activation, Activation::kGeluTanh);
    j["hidden_activation"] = "silu";
    EXPECT_EQ(Parse(j)->activation, Activation::kSilu);
  }
}

TEST(GemmaConfigTest, Gemma3IgnoresAttentionSoftcapAsTransformers524Does) {
  json j = json::parse(kGemma3_270m);
  j["attn_logit_softcapping"] = 50.0;
  auto c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_FLOAT_EQ(c->attn_softcap, 0.0f);
}

TEST(GemmaConfigTest, RejectsWhatItDoesNotHandle) {
  for (const char* base : {kGemma2_2b, kGemma3_270m}) {
    SCOPED_TRACE(json::parse(base)["architectures"][0].get<std::string>());
    json j = json::parse(base);
    j["use_bidirectional_attention"] = true;
    ExpectRejected(j, {"use_bidirectional_attention"});
    for (const char* act : {"relu", "gelu_new", "gelu_python", "quick_gelu"}) {
      j = json::parse(base);
      j["hidden_activation"] = act;
      ExpectRejected(j, {std::string("hidden_activation '") + act + "' is not supported", "gelu_pytorch_tanh"});
    }
    j = json::parse(base);
    j["hidden_activation"] = nullptr;  // Gemma2Config / Gemma3TextConfig refuse a null too
    ExpectRejected(j, {"field 'hidden_activation' must be a string, got null"});
    j = json::parse(base);
    j["layer_types"] = json::array();
    ExpectRejected(j, {"layer_types"});
    j = json::parse(base);
    j["layer_types"] = json::array();
    for (int i = 0; i < j["num_hidden_layers"].get<int>(); ++i) j["layer_types"].push_back("chunked_attention");
    ExpectRejected(j, {"layer_types", "chunked_attention"});
    j = json::parse(base);
    j["sliding_window"] = nullptr;
    ExpectRejected(j, {"sliding_window"});
    j = json::parse(base);
    j["query_pre_attn_scalar"] = 0;
    ExpectRejected(j, {"query_pre_attn_scalar"});
    j = json::parse(base);
    j["final_logit_softcapping"] = -1.0;
    ExpectRejected(j, {"final_logit_softcapping"});
    j = json::parse(base);
    j["num_key_value_heads"] = 3;
    ExpectRejected(j, {"num_key_value_heads"});
  }
  json j = json::parse(kGemma3_270m);
  j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 1e4}};  // not per layer type
  ExpectRejected(j, {"rope_parameters", "full_attention"});
  j = json::parse(kGemma3_270m);
  j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
  ExpectRejected(j, {"rope_scaling", "yarn"});
}

}  // namespace
}  // namespace loom
