// Tests of config.json parsing: the fixture models, real-world configs, and every reject path.
#include "model/config.h"

#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "io/safetensors.h"
#include "model/registry.h"

namespace loom {
namespace {

using json = nlohmann::json;

const std::string kModels = std::string(LOOM_FIXTURES) + "/models";
const std::string kConfigs = std::string(LOOM_FIXTURES) + "/shared/model_configs";
const char kWhere[] = "test/config.json";

::testing::AssertionResult Contains(const std::string& text, const std::string& part) {
  if (text.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "'" << part << "' not in: " << text;
}

// ---------------------------------------------------------------------------------------
// The fixture models (tiny HF checkpoints saved by transformers 5).

struct FixtureWant {
  std::string name;
  std::string architecture;
  int head_dim;
  bool qkv_bias;
  bool qk_norm;
  bool tie;
  double theta;
  RopeScaling scaling;
  int sliding_window;
  double rms_norm_eps;
};

class FixtureConfigTest : public ::testing::TestWithParam<std::string> {};

TEST_P(FixtureConfigTest, ParsesWithTheRightValues) {
  const std::string model = GetParam();
  const std::string family = model.substr(0, model.find('_'));
  const bool is_f32 = model.ends_with("_f32");
  const std::vector<FixtureWant> wants = {
      {"llama", "LlamaForCausalLM", 16, false, false, false, 10000.0, RopeScaling::kLlama3, 0,
       1e-5},
      {"mistral", "MistralForCausalLM", 16, false, false, false, 10000.0, RopeScaling::kNone, 8,
       1e-5},
      {"qwen2", "Qwen2ForCausalLM", 16, true, false, true, 1e6, RopeScaling::kNone, 0, 1e-6},
      {"qwen3", "Qwen3ForCausalLM", 32, false, true, false, 1e6, RopeScaling::kNone, 0, 1e-6},
  };
  const FixtureWant* want = nullptr;
  for (const auto& w : wants) {
    if (w.name == family) want = &w;
  }
  ASSERT_NE(want, nullptr) << model;

  auto c = LoadModelConfig(kModels + "/" + model);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->architecture, want->architecture);
  EXPECT_EQ(c->model_type, family);
  EXPECT_EQ(c->vocab_size, 256);
  EXPECT_EQ(c->model_dim, 64);
  EXPECT_EQ(c->ffn_dim, 128);
  EXPECT_EQ(c->num_layers, 3);
  EXPECT_EQ(c->num_heads, 4);
  EXPECT_EQ(c->num_kv_heads, 2);  // GQA: two query heads per kv head
  EXPECT_EQ(c->head_dim, want->head_dim);
  EXPECT_EQ(c->max_position_embeddings, 512);
  EXPECT_DOUBLE_EQ(c->rms_norm_eps, want->rms_norm_eps);
  EXPECT_EQ(c->qkv_bias, want->qkv_bias);
  EXPECT_FALSE(c->o_bias);
  EXPECT_FALSE(c->mlp_bias);
  EXPECT_EQ(c->qk_norm, want->qk_norm);
  EXPECT_EQ(c->tie_word_embeddings, want->tie);
  EXPECT_DOUBLE_EQ(c->rope.theta, want->theta);
  EXPECT_EQ(c->rope.scaling, want->scaling);
  if (want->scaling == RopeScaling::kLlama3) {
    EXPECT_DOUBLE_EQ(c->rope.factor, 8.0);
    EXPECT_DOUBLE_EQ(c->rope.low_freq_factor, 1.0);
    EXPECT_DOUBLE_EQ(c->rope.high_freq_factor, 4.0);
    EXPECT_EQ(c->rope.original_max_position, 64);
  }
  ASSERT_EQ(c->layers.size(), 3u);
  for (const auto& layer : c->layers) EXPECT_EQ(layer.sliding_window, want->sliding_window);
  EXPECT_EQ(c->bos_token_id, 1);
  EXPECT_EQ(c->eos_token_ids, std::vector<int>{2});
  EXPECT_EQ(c->dtype, is_f32 ? DType::kF32 : DType::kBF16);
}

INSTANTIATE_TEST_SUITE_P(Models, FixtureConfigTest,
                         ::testing::Values("llama_f32", "llama_bf16", "mistral_f32", "mistral_bf16",
                                           "qwen2_f32", "qwen2_bf16", "qwen3_f32", "qwen3_bf16"));

// ---------------------------------------------------------------------------------------
// Real configs (copies of shared/fixtures/model_configs, see tests/fixtures/shared/PROVENANCE.md).

TEST(RealConfigTest, SmolLM135M) {
  auto c = LoadModelConfig(kConfigs + "/SmolLM-135M-sft");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->architecture, "LlamaForCausalLM");
  EXPECT_EQ(c->vocab_size, 49154);
  EXPECT_EQ(c->model_dim, 576);
  EXPECT_EQ(c->ffn_dim, 1536);
  EXPECT_EQ(c->num_layers, 30);
  EXPECT_EQ(c->num_heads, 9);
  EXPECT_EQ(c->num_kv_heads, 3);
  EXPECT_EQ(c->head_dim, 64);
  EXPECT_EQ(c->max_position_embeddings, 2048);
  EXPECT_TRUE(c->tie_word_embeddings);
  EXPECT_EQ(c->rope.scaling, RopeScaling::kNone);  // "rope_scaling": null
  EXPECT_DOUBLE_EQ(c->rope.theta, 10000.0);
  EXPECT_DOUBLE_EQ(c->rms_norm_eps, 1e-5);
  EXPECT_EQ(c->dtype, DType::kF32);  // torch_dtype
  EXPECT_EQ(c->bos_token_id, 0);
  EXPECT_EQ(c->eos_token_ids, std::vector<int>{0});
  EXPECT_EQ(c->layers.size(), 30u);
}

TEST(RealConfigTest, Llama32With4xRopeScalingForm) {
  auto c = LoadModelConfig(kConfigs + "/Llama-3.2-3B-Instruct-unsloth-merged");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->architecture, "LlamaForCausalLM");
  EXPECT_EQ(c->vocab_size, 128256);
  EXPECT_EQ(c->model_dim, 3072);
  EXPECT_EQ(c->ffn_dim, 8192);
  EXPECT_EQ(c->num_layers, 28);
  EXPECT_EQ(c->num_heads, 24);
  EXPECT_EQ(c->num_kv_heads, 8);
  EXPECT_EQ(c->head_dim, 128);
  EXPECT_EQ(c->max_position_embeddings, 131072);
  EXPECT_TRUE(c->tie_word_embeddings);
  EXPECT_FALSE(c->qkv_bias);
  // "rope_scaling": {"rope_type": "llama3", ...} with a top-level "rope_theta".
  EXPECT_EQ(c->rope.scaling, RopeScaling::kLlama3);
  EXPECT_DOUBLE_EQ(c->rope.theta, 500000.0);
  EXPECT_DOUBLE_EQ(c->rope.factor, 32.0);
  EXPECT_DOUBLE_EQ(c->rope.low_freq_factor, 1.0);
  EXPECT_DOUBLE_EQ(c->rope.high_freq_factor, 4.0);
  EXPECT_EQ(c->rope.original_max_position, 8192);
  EXPECT_EQ(c->dtype, DType::kF16);
  EXPECT_EQ(c->bos_token_id, 128000);
  // generation_config.json's list wins over config.json's single 128009.
  EXPECT_EQ(c->eos_token_ids, (std::vector<int>{128001, 128008, 128009}));
}

// The "Phi-3-mini" folder holds unsloth's Mistral-format conversion: its config says
// MistralForCausalLM, so it is supported (head_dim 96, no GQA, window on every layer).
TEST(RealConfigTest, Phi3MiniSavedAsMistral) {
  auto c = LoadModelConfig(kConfigs + "/Phi-3-mini-4k-instruct-unsloth-merged");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->architecture, "MistralForCausalLM");
  EXPECT_EQ(c->model_dim, 3072);
  EXPECT_EQ(c->num_heads, 32);
  EXPECT_EQ(c->num_kv_heads, 32);
  EXPECT_EQ(c->head_dim, 96);
  EXPECT_EQ(c->vocab_size, 32064);
  ASSERT_EQ(c->layers.size(), 32u);
  for (const auto& layer : c->layers) EXPECT_EQ(layer.sliding_window, 2048);
  EXPECT_EQ(c->eos_token_ids, (std::vector<int>{32000, 32001, 32007}));
}

TEST(RealConfigTest, Phi15IsRejectedNamingItsArchitecture) {
  const std::string dir = kConfigs + "/phi-1_5-peft-repo";
  auto c = LoadModelConfig(dir);
  ASSERT_FALSE(c.ok());
  const std::string m = c.status().message();
  EXPECT_TRUE(Contains(m, dir + "/config.json"));
  EXPECT_TRUE(Contains(m, "'MixFormerSequentialForCausalLM' is not supported"));
  for (const auto& arch : Architectures()) EXPECT_TRUE(Contains(m, arch.hf_name));
}

TEST(RealConfigTest, Phi3ArchitectureOnTheRealConfig) {
  // The same real Phi-3 config with the architecture microsoft/Phi-3-mini-4k-instruct uses.
  auto text = ReadTextFile(kConfigs + "/Phi-3-mini-4k-instruct-unsloth-merged/config.json");
  ASSERT_TRUE(text.ok());
  json j = json::parse(*text);
  j["architectures"] = {"Phi3ForCausalLM"};
  auto c = ParseModelConfig(j.dump(), "", kWhere);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_TRUE(c->fused_qkv);
  EXPECT_TRUE(c->fused_gate_up);
  EXPECT_EQ(c->head_dim, 96);
  EXPECT_EQ(RopeDim(c->rope, c->head_dim), 96);
  EXPECT_EQ(c->rope.scaling, RopeScaling::kNone);
  for (const auto& layer : c->layers) EXPECT_EQ(layer.sliding_window, 2048);
  // Phi-3.5-mini's rope: longrope with 48 factors each, original 4096 of 131072.
  j["max_position_embeddings"] = 131072;
  j["original_max_position_embeddings"] = 4096;
  j["rope_scaling"] = {{"type", "longrope"},
                       {"short_factor", std::vector<double>(48, 1.05)},
                       {"long_factor", std::vector<double>(48, 20.0)}};
  c = ParseModelConfig(j.dump(), "", kWhere);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->rope.scaling, RopeScaling::kLongRope);
  EXPECT_EQ(c->rope.original_max_position, 4096);
  EXPECT_NEAR(c->rope.attention_factor, std::sqrt(1 + std::log(32.0) / std::log(4096.0)), 1e-12);
  // Phi-4-mini: partial_rotary_factor 0.75 of head_dim 128 rotates 96 dims, 48 factors.
  j["hidden_size"] = 3072;
  j["head_dim"] = 128;
  j["num_attention_heads"] = 24;
  j["num_key_value_heads"] = 8;
  j["partial_rotary_factor"] = 0.75;
  c = ParseModelConfig(j.dump(), "", kWhere);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->rope.rotary_dim, 96);
  j["rope_scaling"]["long_factor"] = std::vector<double>(64, 20.0);
  c = ParseModelConfig(j.dump(), "", kWhere);
  ASSERT_FALSE(c.ok());
  EXPECT_TRUE(Contains(c.status().message(), "long_factor has 64 entries"));
  // Phi3 takes only default and longrope.
  j["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}};
  c = ParseModelConfig(j.dump(), "", kWhere);
  ASSERT_FALSE(c.ok());
  EXPECT_TRUE(Contains(c.status().message(), "default or longrope"));
}

TEST(RealConfigTest, ShardIndexWithoutShardsFailsNamingTheShard) {
  for (const char* dir :
       {"Llama-3.2-3B-Instruct-unsloth-merged", "Phi-3-mini-4k-instruct-unsloth-merged"}) {
    SCOPED_TRACE(dir);
    const std::string index = kConfigs + "/" + dir + "/model.safetensors.index.json";
    auto s = SafetensorsStore::Open(index);
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.status().code(), StatusCode::kNotFound);
    EXPECT_TRUE(
        Contains(s.status().message(), kConfigs + "/" + dir + "/model-00001-of-00002.safetensors"));
    // And through the folder.
    auto by_dir = SafetensorsStore::Open(kConfigs + "/" + dir);
    ASSERT_FALSE(by_dir.ok());
    EXPECT_TRUE(Contains(by_dir.status().message(), "model-00001-of-00002.safetensors"));
  }
}

// ---------------------------------------------------------------------------------------
// Reject paths, on a valid Llama-style base config with one thing changed.

json BaseConfig() {
  return json::parse(R"({
    "architectures": ["LlamaForCausalLM"], "model_type": "llama",
    "vocab_size": 320, "hidden_size": 96, "intermediate_size": 160, "num_hidden_layers": 2,
    "num_attention_heads": 6, "num_key_value_heads": 2, "max_position_embeddings": 1024,
    "rms_norm_eps": 1e-5, "hidden_act": "silu", "rope_theta": 50000.0,
    "bos_token_id": 3, "eos_token_id": 7, "tie_word_embeddings": false
  })");
}

StatusOr<ModelConfig> Parse(const json& j, const std::string& gen = "") {
  return ParseModelConfig(j.dump(), gen, kWhere);
}

// Expects `j` to be rejected with a message naming the file and holding every needle.
void ExpectRejected(const json& j, const std::vector<std::string>& needles,
                    const std::string& gen = "") {
  auto c = Parse(j, gen);
  ASSERT_FALSE(c.ok()) << "accepted: " << j.dump();
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(c.status().message(), kWhere));
  for (const auto& n : needles) EXPECT_TRUE(Contains(c.status().message(), n)) << j.dump();
}

TEST(ConfigRejectTest, BaseConfigIsValid) {
  auto c = Parse(BaseConfig());
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->head_dim, 16);
  EXPECT_EQ(c->num_kv_heads, 2);
  EXPECT_DOUBLE_EQ(c->rope.theta, 50000.0);
  EXPECT_EQ(c->eos_token_ids, std::vector<int>{7});
  EXPECT_EQ(c->dtype, DType::kBF16);  // no dtype given
}

// Each generated token is compared with every EOS id: a list of millions slowed decoding 30×.
TEST(ConfigRejectTest, EosListIsBoundedSortedAndDeduplicated) {
  json j = BaseConfig();
  j["eos_token_id"] = json::array();
  for (int i = 0; i < 1025; ++i) j["eos_token_id"].push_back(7);
  ExpectRejected(j, {"eos_token_id lists 1025 ids, more than 1024"});
  j["eos_token_id"] = {9, 7, 9, 3};
  auto c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->eos_token_ids, (std::vector<int>{3, 7, 9}));
}

TEST(ConfigRejectTest, NotJson) {
  auto c = ParseModelConfig("{\"architectures\": [", "", kWhere);
  ASSERT_FALSE(c.ok());
  EXPECT_TRUE(Contains(c.status().message(), kWhere));
  EXPECT_TRUE(Contains(c.status().message(), "not valid JSON"));
  EXPECT_TRUE(Contains(c.status().message(), "column 20"));  // where it broke
  auto arr = ParseModelConfig("[1, 2]", "", kWhere);
  ASSERT_FALSE(arr.ok());
  EXPECT_TRUE(Contains(arr.status().message(), "not a valid JSON object"));
}

TEST(ConfigRejectTest, MissingOrEmptyArchitectures) {
  json j = BaseConfig();
  j.erase("architectures");
  ExpectRejected(j, {"missing 'architectures'", "LlamaForCausalLM", "Qwen3ForCausalLM"});
  j["architectures"] = json::array();
  ExpectRejected(j, {"missing 'architectures'"});
  j["architectures"] = "LlamaForCausalLM";  // a string, not a list
  ExpectRejected(j, {"missing 'architectures'"});
}

TEST(ConfigRejectTest, UnknownArchitecture) {
  json j = BaseConfig();
  j["architectures"] = {"GPT2LMHeadModel"};
  ExpectRejected(j, {"'GPT2LMHeadModel' is not supported", SupportedArchitectureList()});
}

TEST(ConfigRejectTest, MissingRequiredFields) {
  for (const char* key : {"hidden_size", "vocab_size", "intermediate_size", "num_hidden_layers",
                          "num_attention_heads"}) {
    json j = BaseConfig();
    j.erase(key);
    ExpectRejected(j, {std::string("missing required field '") + key + "'"});
    j[key] = nullptr;
    ExpectRejected(j, {std::string("missing required field '") + key + "'"});
  }
}

TEST(ConfigRejectTest, WrongTypes) {
  json j = BaseConfig();
  j["hidden_size"] = "96";
  ExpectRejected(j, {"field 'hidden_size' must be an integer", "\"96\""});
  j = BaseConfig();
  j["hidden_size"] = 96.5;
  ExpectRejected(j, {"field 'hidden_size' must be an integer"});
  j = BaseConfig();
  j["num_hidden_layers"] = 5000000000LL;
  ExpectRejected(j, {"field 'num_hidden_layers' is 5000000000, above the maximum 1024"});
  j = BaseConfig();
  j["rms_norm_eps"] = "1e-5";
  ExpectRejected(j, {"field 'rms_norm_eps' must be a number"});
  j = BaseConfig();
  j["tie_word_embeddings"] = "yes";
  ExpectRejected(j, {"field 'tie_word_embeddings' must be true or false"});
  j = BaseConfig();
  j["eos_token_id"] = "7";
  ExpectRejected(j, {"eos_token_id must be an integer or a list"});
  j = BaseConfig();
  j["eos_token_id"] = {7, "8"};
  ExpectRejected(j, {"eos_token_id entries must be integers"});
  j = BaseConfig();
  j["rope_scaling"] = "llama3";
  ExpectRejected(j, {"'rope_scaling' must be an object"});
}

TEST(ConfigRejectTest, NonPositiveSizes) {
  for (const char* key :
       {"hidden_size", "num_key_value_heads", "vocab_size", "num_hidden_layers"}) {
    json j = BaseConfig();
    j[key] = 0;
    ExpectRejected(j, {std::string("field '") + key + "' is 0, below the minimum 1"});
    j[key] = -4;
    ExpectRejected(j, {std::string("field '") + key + "' is -4, below the minimum 1"});
  }
}

// Sizes are capped before anything is allocated from them (num_hidden_layers: 1e8 used to
// size a vector of layers; bad_alloc aborted the process).
TEST(ConfigRejectTest, SizesAboveTheirCapsNameTheFieldAndTheCap) {
  const std::vector<std::pair<const char*, int64_t>> caps = {
      {"num_hidden_layers", kMaxConfigLayers},  {"hidden_size", kMaxConfigModelDim},
      {"intermediate_size", kMaxConfigFfnDim},  {"vocab_size", kMaxConfigVocab},
      {"num_attention_heads", kMaxConfigHeads}, {"num_key_value_heads", kMaxConfigHeads},
      {"head_dim", kMaxConfigHeadDim},          {"max_position_embeddings", kMaxConfigPositions}};
  for (const auto& [key, cap] : caps) {
    json j = BaseConfig();
    j[key] = cap + 1;
    ExpectRejected(j, {std::string("field '") + key + "' is " + std::to_string(cap + 1) +
                       ", above the maximum " + std::to_string(cap)});
    j[key] = 1e8;  // a float with an integral value is read as the integer
    ExpectRejected(j, {std::string("field '") + key + "' is 100000000, above the maximum"});
  }
}

// Values outside a field's domain would be served as NaN logits (all-zero tokens).
TEST(ConfigRejectTest, RopeThetaAndRmsNormEpsOutsideTheirDomain) {
  for (double theta : {0.0, -10000.0}) {
    json j = BaseConfig();
    j["rope_theta"] = theta;
    ExpectRejected(j, {"field 'rope_theta' must be positive"});
    j = BaseConfig();
    j["rope_scaling"] = {{"rope_type", "default"}, {"rope_theta", theta}};
    ExpectRejected(j, {"rope_scaling", "field 'rope_theta' must be positive"});
  }
  for (double eps : {0.0, -1e-6, 1.0, 5.0}) {
    json j = BaseConfig();
    j["rms_norm_eps"] = eps;
    ExpectRejected(j, {"field 'rms_norm_eps' must be in (0, 1)"});
  }
  // JSON has no NaN/Infinity literals, and a huge exponent is a parse error, not inf.
  std::string text = BaseConfig().dump();
  text.insert(1, "\"rope_theta\": 1e999, ");
  auto c = ParseModelConfig(text, "", kWhere);
  ASSERT_FALSE(c.ok());
  EXPECT_TRUE(Contains(c.status().message(), "number overflow")) << c.status().message();
}

TEST(ConfigRejectTest, DeeplyNestedConfigAndGenerationConfigAreRefusedWithoutRecursion) {
  const std::string deep = std::string(200000, '[') + std::string(200000, ']');
  json j = BaseConfig();
  std::string text = j.dump();
  text.insert(1, "\"x\": " + deep + ", ");
  auto c = ParseModelConfig(text, "", kWhere);
  ASSERT_FALSE(c.ok());
  EXPECT_TRUE(Contains(c.status().message(), "JSON nested deeper than 128 levels"));
  auto g = ParseModelConfig(j.dump(), "{\"eos_token_id\": " + deep + "}", kWhere);
  ASSERT_FALSE(g.ok());
  EXPECT_TRUE(Contains(g.status().message(), "generation_config.json"));
  EXPECT_TRUE(Contains(g.status().message(), "JSON nested deeper than 128 levels"));
}

TEST(ConfigRejectTest, HeadsNotAMultipleOfKvHeads) {
  json j = BaseConfig();
  j["num_key_value_heads"] = 4;
  ExpectRejected(j, {"num_attention_heads (6)", "num_key_value_heads (4)", "multiple"});
  // Without num_key_value_heads every head has its own kv head.
  j.erase("num_key_value_heads");
  auto c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->num_kv_heads, 6);
}

TEST(ConfigRejectTest, HeadDim) {
  json j = BaseConfig();
  j["head_dim"] = 15;
  ExpectRejected(j, {"head_dim must be positive and even, got 15"});
  j["head_dim"] = -16;
  ExpectRejected(j, {"field 'head_dim' is -16, below the minimum 0"});
  j = BaseConfig();
  j["hidden_size"] = 100;  // 100 / 6 heads
  ExpectRejected(j, {"hidden_size is not a multiple of num_attention_heads"});
  j = BaseConfig();
  j["hidden_size"] = 90;  // 90 / 6 = 15, odd
  ExpectRejected(j, {"head_dim must be positive and even, got 15"});
  // An explicit head_dim need not divide hidden_size (Qwen3, Gemma style).
  j = BaseConfig();
  j["head_dim"] = 40;
  auto c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->head_dim, 40);
}

TEST(ConfigRejectTest, UnsupportedRopeTypes) {
  for (const char* type : {"yarn", "dynamic", "ntk"}) {
    for (const char* field : {"rope_scaling", "rope_parameters"}) {
      json j = BaseConfig();
      j[field] = {{"rope_type", type}, {"factor", 4.0}};
      ExpectRejected(j, {std::string("rope type '") + type + "' is not supported", field,
                         "default, linear, llama3"});
    }
  }
  // longrope needs its factor lists.
  for (const char* field : {"rope_scaling", "rope_parameters"}) {
    json lj = BaseConfig();
    lj[field] = {{"rope_type", "longrope"}, {"factor", 4.0}};
    ExpectRejected(lj, {"short_factor", field});
  }
  // The 4.x spelling "type" is read too.
  json j = BaseConfig();
  j["rope_scaling"] = {{"type", "dynamic"}, {"factor", 2.0}};
  ExpectRejected(j, {"rope type 'dynamic'"});
}

TEST(ConfigRejectTest, Llama3RopeMissingFields) {
  const json llama3 = {{"rope_type", "llama3"},
                       {"factor", 8.0},
                       {"low_freq_factor", 1.0},
                       {"high_freq_factor", 4.0},
                       {"original_max_position_embeddings", 8192}};
  for (const char* key :
       {"low_freq_factor", "high_freq_factor", "factor", "original_max_position_embeddings"}) {
    json j = BaseConfig();
    j["rope_scaling"] = llama3;
    j["rope_scaling"].erase(key);
    ExpectRejected(j, {"rope_scaling", std::string("missing required field '") + key + "'"});
  }
  json j = BaseConfig();
  j["rope_parameters"] = llama3;
  j["rope_parameters"]["high_freq_factor"] = 1.0;
  ExpectRejected(j, {"rope_parameters", "high_freq_factor must exceed low_freq_factor"});
  j["rope_parameters"] = {{"rope_type", "linear"}, {"factor", -2.0}};
  ExpectRejected(j, {"factor must be positive"});
  j["rope_parameters"] = {{"rope_type", "linear"}};
  ExpectRejected(j, {"missing required field 'factor'"});
  // A type that is not a string was read as absent: plain RoPE, or "type" behind it, where the
  // file asked for llama3 scaling (transformers refuses both).
  j["rope_parameters"] = llama3;
  j["rope_parameters"]["rope_type"] = 5;
  ExpectRejected(j, {"rope_parameters.rope_type: must be a string"});
  j["rope_parameters"]["rope_type"] = json::array({"llama3"});
  j["rope_parameters"]["type"] = "linear";
  ExpectRejected(j, {"rope_parameters.rope_type: must be a string"});
  j["rope_parameters"].erase("rope_type");
  j["rope_parameters"]["type"] = 8.0;
  ExpectRejected(j, {"rope_parameters.type: must be a string"});
  // A "yarn" type with a model_type that is not a string: an error, not an exception.
  j = BaseConfig();
  j["model_type"] = 5;
  j["rope_parameters"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
  EXPECT_FALSE(Parse(j).ok());
}

TEST(ConfigRejectTest, HiddenActOtherThanSiluOrGelu) {
  for (const char* act : {"gelu_new", "gelu_python", "relu"}) {
    json j = BaseConfig();
    j["hidden_act"] = act;
    ExpectRejected(j, {std::string("hidden_act '") + act + "' is not supported", "silu, gelu, gelu_pytorch_tanh"});
  }
  json j = BaseConfig();
  j["hidden_act"] = 3;  // was read as absent: SiLU
  ExpectRejected(j, {"hidden_act must be a string"});
  j["hidden_act"] = "gelu";  // ACT2FN["gelu"]: the exact erf GELU
  auto c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->activation, Activation::kGeluErf);
}

TEST(ConfigRejectTest, EosOutsideVocabulary) {
  json j = BaseConfig();
  j["eos_token_id"] = 320;  // vocab_size is 320
  ExpectRejected(j, {"eos_token_id 320 is outside the vocabulary"});
  j["eos_token_id"] = {7, -1};
  ExpectRejected(j, {"eos_token_id -1 is outside the vocabulary"});
  // An id beyond int32 must not wrap around into the vocabulary (2^32 + 7).
  j["eos_token_id"] = 4294967303LL;
  ExpectRejected(j, {"eos_token_id", "4294967303"});
  // From generation_config.json too.
  j = BaseConfig();
  ExpectRejected(j, {"(generation_config.json): eos_token_id 999 is outside the vocabulary"},
                 R"({"eos_token_id": [7, 999]})");
  ExpectRejected(j, {"generation_config.json"}, "not json");
}

TEST(ConfigTest, GenerationConfigOverridesEosAndBos) {
  auto c = Parse(BaseConfig(), R"({"bos_token_id": 5, "eos_token_id": [9, 11]})");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->bos_token_id, 5);
  EXPECT_EQ(c->eos_token_ids, (std::vector<int>{9, 11}));
  // A generation config without eos keeps config.json's.
  auto keep = Parse(BaseConfig(), R"({"temperature": 0.6})");
  ASSERT_TRUE(keep.ok()) << keep.status().ToString();
  EXPECT_EQ(keep->eos_token_ids, std::vector<int>{7});
}

TEST(ConfigRejectTest, Qwen2LayerTypes) {
  json j = BaseConfig();
  j["architectures"] = {"Qwen2ForCausalLM"};
  j["num_hidden_layers"] = 3;
  j["sliding_window"] = 16;
  j["layer_types"] = {"full_attention", "sliding_attention"};
  ExpectRejected(j, {"layer_types has 2 entries for 3 layers"});
  j["layer_types"] = {"full_attention", "sliding_attention", "chunked_attention"};
  ExpectRejected(j, {"layer_types entry \"chunked_attention\" is not supported"});
  j["layer_types"] = {"full_attention", "sliding_attention", "sliding_attention"};
  j["sliding_window"] = nullptr;
  ExpectRejected(j, {"sliding layer without sliding_window"});

  j["sliding_window"] = 16;
  auto c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_TRUE(c->qkv_bias);
  ASSERT_EQ(c->layers.size(), 3u);
  EXPECT_EQ(c->layers[0].sliding_window, 0);
  EXPECT_EQ(c->layers[1].sliding_window, 16);
  EXPECT_EQ(c->layers[2].sliding_window, 16);
}

TEST(ConfigTest, QwenMaxWindowLayersWithoutLayerTypes) {
  json j = BaseConfig();
  j["architectures"] = {"Qwen3ForCausalLM"};
  j["num_hidden_layers"] = 4;
  j["use_sliding_window"] = true;
  j["sliding_window"] = 32;
  j["max_window_layers"] = 1;  // same rule as transformers: layers >= max_window_layers slide
  auto c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_TRUE(c->qk_norm);
  ASSERT_EQ(c->layers.size(), 4u);
  EXPECT_EQ(c->layers[0].sliding_window, 0);
  for (size_t i = 1; i < 4; ++i) EXPECT_EQ(c->layers[i].sliding_window, 32) << i;

  // A negative max_window_layers means every layer, as in transformers (and must not index
  // before the first layer).
  j["max_window_layers"] = -3;
  auto all = Parse(j);
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  for (const auto& layer : all->layers) EXPECT_EQ(layer.sliding_window, 32);

  // use_sliding_window false: no layer slides whatever the window.
  j["use_sliding_window"] = false;
  auto none = Parse(j);
  ASSERT_TRUE(none.ok()) << none.status().ToString();
  for (const auto& layer : none->layers) EXPECT_EQ(layer.sliding_window, 0);
}

TEST(ConfigRejectTest, MistralNegativeWindow) {
  json j = BaseConfig();
  j["architectures"] = {"MistralForCausalLM"};
  j["sliding_window"] = -8;
  ExpectRejected(j, {"sliding_window must be positive"});
  j["sliding_window"] = nullptr;  // null: full attention
  auto c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  for (const auto& layer : c->layers) EXPECT_EQ(layer.sliding_window, 0);
}

TEST(ConfigTest, LlamaAttentionAndMlpBias) {
  json j = BaseConfig();
  j["attention_bias"] = true;
  j["mlp_bias"] = true;
  auto c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_TRUE(c->qkv_bias);
  EXPECT_TRUE(c->o_bias);
  EXPECT_TRUE(c->mlp_bias);
  EXPECT_FALSE(c->qk_norm);
}

TEST(ConfigTest, RopeScalingAndRopeParametersFormsAgree) {
  // transformers 4.x: rope_scaling + top-level rope_theta.
  json v4 = BaseConfig();
  v4["rope_theta"] = 500000.0;
  v4["rope_scaling"] = {{"rope_type", "llama3"},
                        {"factor", 32.0},
                        {"low_freq_factor", 1.0},
                        {"high_freq_factor", 4.0},
                        {"original_max_position_embeddings", 8192}};
  // transformers 5.x: everything inside rope_parameters.
  json v5 = BaseConfig();
  v5.erase("rope_theta");
  v5["rope_parameters"] = v4["rope_scaling"];
  v5["rope_parameters"]["rope_theta"] = 500000.0;
  for (const json& j : {v4, v5}) {
    auto c = Parse(j);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    EXPECT_EQ(c->rope.scaling, RopeScaling::kLlama3);
    EXPECT_DOUBLE_EQ(c->rope.theta, 500000.0);
    EXPECT_DOUBLE_EQ(c->rope.factor, 32.0);
    EXPECT_DOUBLE_EQ(c->rope.low_freq_factor, 1.0);
    EXPECT_DOUBLE_EQ(c->rope.high_freq_factor, 4.0);
    EXPECT_EQ(c->rope.original_max_position, 8192);
  }
  // Both given: transformers 5 reads `rope_scaling or rope_parameters` (the legacy field wins
  // unless it is empty); loom once read rope_parameters and dropped a linear ×4 without a word.
  json both = v5;
  both["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 4.0}};
  auto b = Parse(both);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(b->rope.scaling, RopeScaling::kLinear);
  EXPECT_DOUBLE_EQ(b->rope.factor, 4.0);
  for (const json& none : {json::object(), json(false), json(0), json(""), json::array()}) {
    both["rope_scaling"] = none;  // falsy in Python: `rope_scaling or rope_parameters` skips it
    b = Parse(both);
    ASSERT_TRUE(b.ok()) << none.dump() << ": " << b.status().ToString();
    EXPECT_EQ(b->rope.scaling, RopeScaling::kLlama3);
  }
  // Linear scaling in the old "type" spelling.
  json lin = BaseConfig();
  lin["rope_scaling"] = {{"type", "linear"}, {"factor", 2.5}};
  auto c = Parse(lin);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->rope.scaling, RopeScaling::kLinear);
  EXPECT_DOUBLE_EQ(c->rope.factor, 2.5);
  EXPECT_DOUBLE_EQ(c->rope.theta, 50000.0);
  // "default" in rope_parameters only carries the theta.
  json def = BaseConfig();
  def.erase("rope_theta");
  def["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 1e6}};
  auto d = Parse(def);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->rope.scaling, RopeScaling::kNone);
  EXPECT_DOUBLE_EQ(d->rope.theta, 1e6);
}

TEST(ConfigTest, TorchDtypeAndDtype) {
  struct Case {
    const char* key;
    const char* value;
    DType want;
  };
  for (const Case& k :
       {Case{"torch_dtype", "float16", DType::kF16}, Case{"torch_dtype", "float32", DType::kF32},
        Case{"dtype", "float32", DType::kF32}, Case{"dtype", "float16", DType::kF16},
        Case{"torch_dtype", "bfloat16", DType::kBF16}}) {
    SCOPED_TRACE(std::string(k.key) + "=" + k.value);
    json j = BaseConfig();
    j[k.key] = k.value;
    auto c = Parse(j);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    EXPECT_EQ(c->dtype, k.want);
  }
}

TEST(ConfigTest, LoadModelConfigMissingFileNamesIt) {
  auto c = LoadModelConfig(kModels + "/no_such_model");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(Contains(c.status().message(), kModels + "/no_such_model/config.json"));
}

}  // namespace
}  // namespace loom
