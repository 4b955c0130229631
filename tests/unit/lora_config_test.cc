// Tests of adapter_config.json parsing: every SPEC-adapters §5 rejection with its message, accepted
// fields, and every real config in shared/adapter_configs (targets and patterns:
// lora_config_targets_test.cc).
#include "lora/lora_config.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "base/mmap_file.h"
#include "unit/lora_config_util.h"

namespace loom {
namespace {

// ---------------------------------------------------------------------------------------
// SPEC §5: each rejected config with its own message.

struct RejectCase {
  std::string name;
  std::string text;
  std::vector<std::string> needles;
};

void PrintTo(const RejectCase& c, std::ostream* os) { *os << c.name; }

class LoraConfigRejectTest : public ::testing::TestWithParam<RejectCase> {};

TEST_P(LoraConfigRejectTest, RejectedWithItsMessage) {
  const RejectCase& c = GetParam();
  auto r = ParseLoraConfig(c.text, kWhere);
  ASSERT_FALSE(r.ok()) << "accepted: " << c.text;
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(r.status().message(), kWhere));  // names the file
  for (const auto& n : c.needles) EXPECT_TRUE(Contains(r.status().message(), n));
}

std::vector<RejectCase> RejectCases() {
  const std::string base_msg = "changes the base weights";
  std::vector<RejectCase> cases = {
      // peft_type other than LORA: other tuners are different math.
      {"adalora",
       Config({{"peft_type", "ADALORA"}}),
       {"peft_type ADALORA is not supported", "peft_type LORA"}},
      {"ia3", Config({{"peft_type", "IA3"}}), {"peft_type IA3 is not supported"}},
      {"prompt_tuning",
       Config({{"peft_type", "PROMPT_TUNING"}}),
       {"peft_type PROMPT_TUNING is not supported"}},
      {"lowercase_lora", Config({{"peft_type", "lora"}}), {"peft_type lora is not supported"}},
      // No peft_type: an MLX or other non-PEFT config.
      {"no_peft_type", Config({}, {"peft_type"}), {"no peft_type", "not a PEFT adapter config"}},
      {"mlx",
       R"({"fine_tune_type": "lora", "lora_parameters": {"rank": 16, "scale": 1.0}})",
       {"no peft_type"}},
      {"peft_type_number", Config({{"peft_type", 1}}), {"no peft_type"}},
      // init_lora_weights that change the base weights.
      {"pissa", Config({{"init_lora_weights", "pissa"}}), {"init_lora_weights 'pissa'", base_msg}},
      {"pissa_niter",
       Config({{"init_lora_weights", "pissa_niter_16"}}),
       {"init_lora_weights 'pissa_niter_16'", base_msg}},
      {"olora", Config({{"init_lora_weights", "olora"}}), {"init_lora_weights 'olora'", base_msg}},
      {"corda", Config({{"init_lora_weights", "corda"}}), {"init_lora_weights 'corda'", base_msg}},
      {"loftq", Config({{"init_lora_weights", "loftq"}}), {"init_lora_weights 'loftq'", base_msg}},
      {"lora_ga",
       Config({{"init_lora_weights", "lora_ga"}}),
       {"init_lora_weights 'lora_ga'", base_msg}},
      // A variant's initialisation, and one loom does not know.
      {"mica",
       Config({{"init_lora_weights", "mica"}}),
       {"init_lora_weights 'mica' is not supported yet", "LoRA variant"}},
      {"unknown_init",
       Config({{"init_lora_weights", "xavier"}}),
       {"init_lora_weights 'xavier' is not supported yet"}},
      // Not implemented yet: said, never ignored.
      {"layer_replication",
       Config({{"layer_replication", {{0, 4}, {2, 5}}}}),
       {"layer_replication is not supported yet", "[[0,4],[2,5]]"}},
      // LoRA on parameters (MoE experts) is a list of parameter paths.
      {"target_parameters",
       Config({{"target_parameters", "feed_forward.experts.down_proj"}}),
       {"target_parameters must be a list"}},
      {"target_parameters_entry",
       Config({{"target_parameters", {5}}}),
       {"target_parameters entries must be strings"}},
      {"use_qalora", Config({{"use_qalora", true}}), {"use_qalora is not supported yet"}},
      {"alora",
       Config({{"alora_invocation_tokens", {128002, 9}}}),
       {"alora_invocation_tokens (activated LoRA) is not supported yet", "128002"}},
      {"bdlora", Config({{"use_bdlora", {{"nblocks", 2}}}}), {"use_bdlora is not supported yet"}},
      {"velora",
       Config({{"velora_config", {{"rank", 1}}}}),
       {"VeLoRA variant is not supported yet", "velora_config"}},
      {"kasa",
       Config({{"kasa_config", {{"beta", 0.1}}}}),
       {"KaSA variant is not supported yet", "kasa_config"}},
      {"monteclora",
       Config({{"monteclora_config", {{"num_variants", 4}}}}),
       {"MonteCLoRA variant is not supported yet", "monteclora_config"}},
      {"arrow",
       Config({{"arrow_config", {{"top_k", 3}}}}),
       {"Arrow variant is not supported yet", "arrow_config"}},
      // Replacing base weights per adapter.
      {"modules_to_save",
       Config({{"modules_to_save", {"lm_head"}}}),
       {"modules_to_save is not supported yet", "replaces whole base modules", "lm_head"}},
      {"trainable_tokens",
       Config({{"trainable_token_indices", {1, 2}}}),
       {"trainable_token_indices is not supported yet", "replaces embedding rows"}},
      {"bias_all",
       Config({{"bias", "all"}}),
       {"bias 'all' is not supported yet", "bias = \"none\""}},
      {"bias_lora_only",
       Config({{"bias", "lora_only"}}),
       {"bias 'lora_only' is not supported yet"}},
      // Review findings: silently read before (bias true as none, [5] as no layer filter,
      // null alpha as the default 8).
      {"bias_true", Config({{"bias", true}}), {"bias must be \"none\", \"all\" or", "true"}},
      {"layers_pattern_number",
       Config({{"layers_pattern", {5}}}),
       {"layers_pattern entries must be strings, got 5"}},
      {"layers_pattern_object",
       Config({{"layers_pattern", {{"a", 1}}}}),
       {"layers_pattern must be a string or a list of strings"}},
      {"lora_alpha_null", Config({{"lora_alpha", nullptr}}), {"lora_alpha is null"}},
      // Targets that cannot match anything.
      {"empty_targets",
       Config({{"target_modules", ojson::array()}}),
       {"target_modules is empty", "would change nothing"}},
      {"null_targets", Config({{"target_modules", nullptr}}), {"target_modules is not set"}},
      {"missing_targets", Config({}, {"target_modules"}), {"target_modules is not set"}},
      {"bad_target_regex",
       Config({{"target_modules", "model\\.layers\\.(\\d+"}}),
       {"target_modules", "invalid regular expression", "model\\.layers\\.(\\d+"}},
      {"bad_exclude_regex",
       Config({{"exclude_modules", "[q_proj"}}),
       {"exclude_modules", "invalid regular expression"}},
      // Finite JSON numbers whose scale is not finite in f32 (every delta would be Inf).
      {"alpha_past_float",
       Config({{"lora_alpha", 1e300}}),
       {"lora_alpha 1e+300 is beyond float range", "scale would be infinite"}},
      {"alpha_pattern_past_float",
       Config({{"alpha_pattern", {{"q_proj", -4e38}}}}),
       {"alpha_pattern value for 'q_proj' -4e+38 is beyond float range"}},
      {"bad_rank_pattern_key",
       Config({{"rank_pattern", {{"q_proj(", 4}}}}),
       {"rank_pattern", "invalid regular expression", "q_proj("}},
      {"target_number",
       Config({{"target_modules", 5}}),
       {"target_modules must be a list or a string"}},
      {"target_entry_number",
       Config({{"target_modules", {"q_proj", 3}}}),
       {"target_modules entries must be strings"}},
      // r ≤ 0 and other bad ranks.
      {"r_zero", Config({{"r", 0}}), {"r must be a positive integer", "got 0"}},
      {"r_negative", Config({{"r", -4}}), {"r must be a positive integer", "got -4"}},
      {"r_string", Config({{"r", "8"}}), {"r must be a positive integer", "got \"8\""}},
      {"r_float", Config({{"r", 8.5}}), {"r must be a positive integer", "got 8.5"}},
      {"r_null", Config({{"r", nullptr}}), {"r must be a positive integer", "got null"}},
      {"r_huge", Config({{"r", 100000}}), {"at most 4096", "got 100000"}},
      {"rank_pattern_zero",
       Config({{"rank_pattern", {{"q_proj", 0}}}}),
       {"rank_pattern value for 'q_proj' must be a positive integer", "got 0"}},
      {"rank_pattern_float",
       Config({{"rank_pattern", {{"q_proj", 4.5}}}}),
       {"rank_pattern value for 'q_proj' must be a positive integer", "got 4.5"}},
      {"rank_pattern_huge",
       Config({{"rank_pattern", {{"q_proj", 1e30}}}}),
       {"rank_pattern value for 'q_proj' must be a positive integer"}},
      {"rank_pattern_string",
       Config({{"rank_pattern", {{"q_proj", "4"}}}}),
       {"rank_pattern value for 'q_proj' must be a number"}},
      {"rank_pattern_list", Config({{"rank_pattern", {4}}}), {"rank_pattern must be an object"}},
      {"alpha_pattern_string",
       Config({{"alpha_pattern", {{"v_proj", "x"}}}}),
       {"alpha_pattern value for 'v_proj' must be a number"}},
      // Other malformed values.
      {"rslora_string", Config({{"use_rslora", "yes"}}), {"use_rslora must be true or false"}},
      {"dora_number", Config({{"use_dora", 1}}), {"use_dora must be true or false"}},
      {"layers_string",
       Config({{"layers_to_transform", "3"}}),
       {"layers_to_transform must be an integer or a list"}},
      {"layers_entry",
       Config({{"layers_to_transform", {1, "x"}}}),
       {"layers_to_transform entries must be integers"}},
      {"not_json", "{\"peft_type\": \"LORA\", ", {"not valid JSON", "column 23"}},
      // Deep nesting is refused before any value is copied or printed (recursion: a 600 KB file
      // of brackets used to overflow the stack).
      {"deep_nesting",
       "{\"peft_type\": " + std::string(300000, '[') + std::string(300000, ']') + "}",
       {"JSON nested deeper than 32 levels"}},
      {"deep_unknown_key",
       Config({{"zzz_future", ojson::parse(std::string(40, '[') + std::string(40, ']'))}}),
       {"JSON nested deeper than 32 levels"}},
      {"json_list", "[1, 2]", {"not a valid JSON object"}},
      {"empty_text", "", {"not valid JSON"}},
  };
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Spec, LoraConfigRejectTest, ::testing::ValuesIn(RejectCases()),
                         [](const auto& info) { return info.param.name; });

// ---------------------------------------------------------------------------------------
// Accepted fields.

TEST(LoraConfigTest, ReadsValuesAndDefaults) {
  LoraConfig c = MustParse(Config({{"r", 16},
                                   {"lora_alpha", 24.5},
                                   {"use_rslora", true},
                                   {"use_dora", true},
                                   {"lora_bias", true},
                                   {"base_model_name_or_path", "Qwen/Qwen2.5-0.5B-Instruct"}}));
  EXPECT_EQ(c.r, 16);
  EXPECT_DOUBLE_EQ(c.lora_alpha, 24.5);
  EXPECT_TRUE(c.use_rslora);
  EXPECT_TRUE(c.use_dora);
  EXPECT_TRUE(c.lora_bias);
  EXPECT_EQ(c.base_model_name_or_path, "Qwen/Qwen2.5-0.5B-Instruct");
  EXPECT_EQ(c.target_list, (std::vector<std::string>{"q_proj", "v_proj"}));
  EXPECT_FALSE(c.target_regex.has_value());
  EXPECT_FALSE(c.all_linear);

  // PEFT's defaults: r = 8, lora_alpha = 8, every flag false.
  LoraConfig d = MustParse(Config({}, {"r", "lora_alpha"}));
  EXPECT_EQ(d.r, 8);
  EXPECT_DOUBLE_EQ(d.lora_alpha, 8.0);
  EXPECT_FALSE(d.use_rslora || d.use_dora || d.lora_bias);
  EXPECT_DOUBLE_EQ(d.ScaleFor("model.layers.0.self_attn.q_proj"), 1.0);
}

// PEFT's LoRA on parameters (fused MoE experts) saves target_modules [] beside its
// target_parameters: that is an adapter, not an empty one.
TEST(LoraConfigTest, EmptyTargetModulesWithTargetParametersIsAccepted) {
  LoraConfig c = MustParse(Config({{"target_modules", ojson::array()},
                                   {"target_parameters", {"mlp.experts.down_proj"}}}));
  EXPECT_EQ(c.target_parameters, std::vector<std::string>{"mlp.experts.down_proj"});
  EXPECT_TRUE(c.target_list.empty());
}

TEST(LoraConfigTest, NullOrEmptyUnsupportedFieldsAndPlainInitsAreAccepted) {
  // What PEFT writes when a feature is off: null, [], {}, false, "none".
  MustParse(Config({{"layer_replication", nullptr},
                    {"target_parameters", ojson::array()},
                    {"use_qalora", false},
                    {"alora_invocation_tokens", nullptr},
                    {"modules_to_save", ojson::array()},
                    {"trainable_token_indices", nullptr},
                    {"use_bdlora", nullptr},
                    {"velora_config", nullptr},
                    {"kasa_config", nullptr},
                    {"monteclora_config", nullptr},
                    {"arrow_config", nullptr},
                    {"loftq_config", ojson::object()},
                    {"bias", "none"},
                    {"fan_in_fan_out", false}}));
  // Initialisations that only set the starting A and B: the trained adapter is a plain LoRA.
  for (const ojson& init :
       {ojson(true), ojson(false), ojson("gaussian"), ojson("eva"), ojson("orthogonal")}) {
    SCOPED_TRACE(init.dump());
    MustParse(Config({{"init_lora_weights", init}}));
  }
}

// What PEFT does with values of another type, checked in its code (peft 0.21: LoraConfig.
// __post_init__, LoraLayer.update_layer / reset_lora_parameters, dispatch_default).
TEST(LoraConfigTest, ValuesOfAnotherTypeAreReadAsPeftReadsThem) {
  // init_lora_weights: a true value that is neither True nor a string reaches .lower() and
  // fails; a false one skips the initialisation; "Gaussian" is compared lowercased.
  for (const ojson& bad : {ojson(5), ojson(1), ojson(0.5), ojson({1}), ojson({{"a", 1}})}) {
    auto c = ParseLoraConfig(Config({{"init_lora_weights", bad}}), kWhere);
    ASSERT_FALSE(c.ok()) << bad.dump();
    EXPECT_TRUE(Contains(c.status().message(),
                         "init_lora_weights must be true, false or a string, got " + bad.dump()));
  }
  for (const ojson& ok : {ojson(0), ojson(nullptr), ojson::array(), ojson("Gaussian"), ojson("")}) {
    SCOPED_TRACE(ok.dump());
    MustParse(Config({{"init_lora_weights", ok}}));
  }
  auto olora = ParseLoraConfig(Config({{"init_lora_weights", "OLoRA"}}), kWhere);
  ASSERT_FALSE(olora.ok());
  EXPECT_TRUE(Contains(olora.status().message(), "changes the base weights"));
  // lora_bias with an initialisation other than true / false: PEFT's __post_init__ raises.
  auto bias =
      ParseLoraConfig(Config({{"lora_bias", true}, {"init_lora_weights", "gaussian"}}), kWhere);
  ASSERT_FALSE(bias.ok());
  EXPECT_TRUE(Contains(
      bias.status().message(),
      "lora_bias is only supported with init_lora_weights true or false, got \"gaussian\""));
  MustParse(Config({{"lora_bias", true}, {"init_lora_weights", false}}));
  MustParse(Config({{"lora_bias", true}}));  // absent: PEFT's default, true
  // fan_in_fan_out: PEFT resets it to what the layer type needs (False for nn.Linear, with a
  // warning), whatever the file says.
  for (const ojson& any : {ojson(true), ojson("yes"), ojson(1)}) {
    MustParse(Config({{"fan_in_fan_out", any}}));
  }
}

// PEFT 0.21's LoraConfig: "When `layers_pattern` is specified, `layers_to_transform` must also be
// specified" — `layers_to_transform is None` only: a layers_to_transform of 0 is layer 0 (found
// by the random PEFT vectors: loom refused what PEFT saves), and [] restricts nothing.
TEST(LoraConfigTest, LayersPatternWithoutLayersToTransformIsRefused) {
  ojson patch = {{"layers_pattern", "layers"}, {"layers_to_transform", nullptr}};
  auto c = ParseLoraConfig(Config(patch), kWhere);
  ASSERT_FALSE(c.ok());
  EXPECT_TRUE(
      Contains(c.status().message(), "layers_pattern is set but layers_to_transform is not"));
  LoraConfig zero = MustParse(Config({{"layers_pattern", "layers"}, {"layers_to_transform", 0}}));
  EXPECT_EQ(zero.layers_to_transform, std::vector<int>{0});
  LoraConfig empty =
      MustParse(Config({{"layers_pattern", "layers"}, {"layers_to_transform", ojson::array()}}));
  EXPECT_TRUE(empty.layers_to_transform.empty());
  auto absent = ParseLoraConfig(Config({{"layers_pattern", {"h", "layers"}}}), kWhere);
  EXPECT_FALSE(absent.ok());
  for (const ojson& unset : {ojson(nullptr), ojson(""), ojson::array()}) {
    MustParse(Config({{"layers_pattern", unset}}));
  }
}

TEST(LoraConfigTest, NestingOfRealConfigsIsAccepted) {
  // An unknown key nested 30 levels deep is still just an ignored key.
  LoraConfig c = MustParse(
      Config({{"zzz_future", ojson::parse(std::string(30, '[') + std::string(30, ']'))}}));
  EXPECT_EQ(c.ignored_keys, std::vector<std::string>{"zzz_future"});
}

TEST(LoraConfigTest, UnknownKeysAreIgnoredAndListedInFileOrder) {
  const std::string text = R"({
    "zeta_future_field": {"x": 1},
    "peft_type": "LORA",
    "peft_version": "0.19.1",
    "r": 8,
    "target_modules": ["q_proj"],
    "ensure_weight_tying": false,
    "alpha_future": [1, 2],
    "lora_dropout": 0.05,
    "task_type": "CAUSAL_LM",
    "auto_mapping": null
  })";
  LoraConfig c = MustParse(text);
  // peft_version and ensure_weight_tying are PEFT's own (every 0.17+ config has them): known,
  // so no adapter of a current PEFT is noted for them.
  EXPECT_EQ(c.ignored_keys, (std::vector<std::string>{"zeta_future_field", "alpha_future"}));
}

// ---------------------------------------------------------------------------------------
// Every real adapter_config.json: accepted (with its r, alpha and what it targets on a
// 32-layer Llama-family model) or rejected with the reason. Targeted counts were computed with
// PEFT 0.21.2's own check_target_module_exists over the same 226 module paths.

struct RealConfigWant {
  std::string reject;  // substring of the rejection; empty = accepted
  int r = 0;
  double alpha = 0;
  int llama_targets = 0;  // modules targeted on a 32-layer Llama; 0 = LoadAdapter rejects it
};

const std::map<std::string, RealConfigWant>& RealConfigWants() {
  static const std::map<std::string, RealConfigWant> wants = {
      {"0112LY-logo-gemma-lora__1.json", {"", 4, 4, 64}},
      {"3L0L0-FLAN-T5-Motivation-Model__1.json", {"", 16, 32, 0}},  // T5: q, k, v, o
      {"ABISHEAK-std-TinyLlama-structured-output-finetuned-using-Lora__1.json", {"", 16, 32, 224}},
      {"Amber-slp-mias__1.json", {"", 64, 128, 224}},
      {"BooniesFX-ChatGLM-Efficient-Tuning__1.json", {"", 32, 32, 0}},  // ChatGLM query_key_value
      {"CaoThanhNammm-chatbot_bank__1.json", {"", 16, 32, 224}},
      {"ChisomOkwor-homework4-vlm__2.json", {"", 8, 32, 224}},
      {"D3voz-joy-caption-alpha-two-gui-mod__1.json", {"", 64, 16, 224}},
      {"Dheena731-tinyLlama-finetune__1.json", {"", 8, 32, 64}},
      {"EDLlyc-kangya-glm4-lora__1.json", {"", 8, 16, 0}},
      {"GowthamNats-MicrosoftPhi1_5_finetuned-__1.json", {"", 16, 16, 0}},  // phi: Wqkv, fc1
      {"Hareshjethani-BERT-GPT2-Multitask-Finetuning__1.json",
       {"modules_to_save is not supported yet"}},
      {"Hastws-NVIDIA-Nemotron-Model-Reasoning-Challenge__1.json", {"", 32, 32, 192}},
      {"I-Quit-Bro-flan-t5-large-finetuned__1.json", {"", 16, 32, 0}},
      {"Inishpy-lerobot-libero__1.json", {"no peft_type"}},
      {"Jason-Youu-unsloth-GRPO__1.json", {"", 32, 32, 224}},
      {"JerryGao237-LLM_fine_tune__1.json", {"", 16, 32, 128}},
      {"KZ-Shi-LLaMA-E__1.json", {"", 8, 16, 128}},
      {"LTtt456c-InternLM_AdapterModel__1.json", {"", 64, 16, 224}},
      {"Mar-IA-no-deamoncraft-gemma4-andy__1.json", {"", 16, 32, 224}},   // exclude regex
      {"MountainAlpha-falcon-7b_lora_finetune__1.json", {"", 8, 32, 0}},  // W_pack
      {"Nabeegh-Ahmed-phi-2-coding-expert__1.json", {"", 32, 64, 0}},
      {"Ningguang826-LLM-gemma270m-svg-logo-lora__1.json", {"", 32, 64, 224}},
      {"StarRing2022-ChatGPTX-Uni__1.json", {"", 8, 16, 64}},
      {"TFM-HITESH-MedAI__1.json", {"", 16, 32, 64}},
      {"TING-lct-house_layout_qwenvl__1.json", {"", 8, 16, 224}},  // regex target
      {"TING-lct-house_layout_qwenvl__2.json", {"", 8, 16, 196}},  // 196 full paths, 28 layers
      {"Weng1002-ZH-TW-Reading-Comprehension-Test-for-LLMs__1.json", {"", 8, 16, 128}},
      {"Zanggar-T-mistral-lora-finetune__1.json", {"", 8, 16, 128}},
      {"alighasemi931-mistral-7b-qlora-yelp__1.json", {"", 8, 16, 128}},
      {"authurlord-DataSelection-IF__2.json", {"modules_to_save is not supported yet"}},
      {"authurlord-DataSelection-IF__3.json", {"", 16, 32, 224}},
      {"authurlord-DataSelection-IF__4.json", {"", 16, 32, 224}},
      {"bikav-ChatGLM-6b_LoRA__1.json", {"", 32, 32, 0}},
      {"ccontreras17-llm-tinyllama-fullstack-pipeline__1.json", {"", 8, 16, 12}},  // layers 15-20
      {"chan4lk-mlx-fine-tune__1.json", {"no peft_type"}},                         // MLX
      {"darwinj07-KoAlpaca-lora__1.json", {"", 8, 16, 64}},
      {"ferrazzipietro-mistral_finetuning__1.json", {"bias 'lora_only' is not supported yet"}},
      {"gluttony-10-ChatGLM-Lora__1.json", {"", 32, 32, 0}},
      {"hazemzidan4545-medical-qa-fine-tuning-phi-3-5-mini__2.json",
       {"peft_type PROMPT_TUNING is not supported"}},
      {"huggingface-peft__1.json", {"target_modules is not set"}},  // an experiment's input config
      {"huggingface-peft__10.json", {"peft_type IA3 is not supported"}},
      {"huggingface-peft__3.json", {"target_modules is not set"}},
      {"huggingface-peft__4.json", {"", 10, 20, 96}},
      {"huggingface-peft__5.json", {"use_bdlora is not supported yet"}},
      {"huggingface-peft__7.json", {"", 8, 16, 64}},
      {"huggingface-peft__8.json", {"", 32, 32, 0}},  // FLUX diffusion transformer
      {"huggingface-peft__9.json", {"peft_type ADALORA is not supported"}},
      {"jaisharmz-abliteration-exp__2.json", {"", 8, 16, 224}},
      {"kashewknutt-personality-bot__1.json", {"", 32, 16, 224}},
      {"kashewknutt-personality-bot__2.json", {"", 32, 16, 224}},
      {"lab-v2-llm-narrative-transformation__1.json", {"", 4, 4, 32}},
      {"lucamiletto-MediQAlpaca__1.json", {"", 8, 16, 64}},
      {"sherryxzhao-lora_alpaca__1.json", {"", 8, 32, 64}},
      {"zy-fun-peft-lora-flan__1.json", {"", 16, 32, 0}},
  };
  return wants;
}

TEST(LoraConfigRealFilesTest, EveryRealConfigIsAcceptedOrRejectedWithItsReason) {
  std::set<std::string> files;
  for (const auto& e : fs::directory_iterator(kRealConfigs)) {
    if (e.path().extension() == ".json") files.insert(e.path().filename().string());
  }
  ASSERT_EQ(files.size(), 55u) << "the copy of shared/fixtures/adapter_configs is incomplete";
  const auto& wants = RealConfigWants();
  int accepted = 0, rejected = 0;
  for (const std::string& name : files) {
    SCOPED_TRACE(name);
    auto it = wants.find(name);
    ASSERT_NE(it, wants.end()) << "no expectation for " << name;
    const RealConfigWant& want = it->second;
    const std::string path = kRealConfigs + "/" + name;
    auto text = ReadTextFile(path);
    ASSERT_TRUE(text.ok()) << text.status().ToString();
    auto c = ParseLoraConfig(*text, path);
    if (!want.reject.empty()) {
      ++rejected;
      ASSERT_FALSE(c.ok()) << "accepted, expected a rejection with: " << want.reject;
      EXPECT_TRUE(Contains(c.status().message(), want.reject));
      EXPECT_TRUE(Contains(c.status().message(), path));
      continue;
    }
    ++accepted;
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    EXPECT_EQ(c->r, want.r);
    EXPECT_DOUBLE_EQ(c->lora_alpha, want.alpha);
    EXPECT_FALSE(c->use_dora || c->lora_bias || c->use_rslora);
    EXPECT_EQ(static_cast<int>(Targeted(*c, 32).size()), want.llama_targets);
  }
  EXPECT_EQ(files.size(), wants.size());  // no stale expectation either
  EXPECT_EQ(accepted, 44);
  EXPECT_EQ(rejected, 11);
}

TEST(LoraConfigRealFilesTest, FullyQualifiedTargetsOfTheTinyLlamaAdapter) {
  const std::string path = kRealConfigs + "/ccontreras17-llm-tinyllama-fullstack-pipeline__1.json";
  auto text = ReadTextFile(path);
  ASSERT_TRUE(text.ok());
  LoraConfig c = MustParse(*text);
  std::set<std::string> want;
  for (int layer = 15; layer <= 20; ++layer) {
    for (const char* m : {"q_proj", "v_proj"}) {
      want.insert("model.layers." + std::to_string(layer) + ".self_attn." + m);
    }
  }
  EXPECT_EQ(Targeted(c, 22), want);
  EXPECT_DOUBLE_EQ(c.ScaleFor("model.layers.15.self_attn.q_proj"), 2.0);
}

TEST(LoraConfigRealFilesTest, GemmaExcludeRegexKeepsTheLanguageModel) {
  const std::string path = kRealConfigs + "/Mar-IA-no-deamoncraft-gemma4-andy__1.json";
  auto text = ReadTextFile(path);
  ASSERT_TRUE(text.ok());
  LoraConfig c = MustParse(*text);
  ASSERT_TRUE(c.exclude_regex.has_value());
  EXPECT_TRUE(c.Targets("model.language_model.layers.0.self_attn.q_proj", kLinearNames));
  EXPECT_FALSE(c.Targets("model.vision_tower.encoder.layers.0.self_attn.q_proj", kLinearNames));
  EXPECT_FALSE(c.Targets("model.audio_tower.layers.3.mlp.up_proj", kLinearNames));
}

}  // namespace
}  // namespace loom