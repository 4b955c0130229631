// Real Gemma adapter configs (gemma-3-270m fine-tunes) on a base of the real gemma-3-270m shapes:
// every target module of every layer attached with its rank, scale and shapes.
#include "unit/adapter_test_util.h"

namespace loom {
namespace {

// Published config.json of google/gemma-3-270m (values as on the hub).
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

// [out, in] of each projection of gemma-3-270m: 4 heads × 256, 1 KV head × 256, hidden 640,
// intermediate 2048.
const std::map<std::string, std::pair<int64_t, int64_t>> kShapes = {
    {"q_proj", {1024, 640}}, {"k_proj", {256, 640}},    {"v_proj", {256, 640}},
    {"o_proj", {640, 1024}}, {"gate_proj", {2048, 640}}, {"up_proj", {2048, 640}},
    {"down_proj", {640, 2048}}};

class RealGemmaAdapterTest : public ::testing::TestWithParam<std::string> {};

TEST_P(RealGemmaAdapterTest, EveryTargetOfEveryLayerAttached) {
  TempDir tmp;
  WriteShapeOnlyBase(tmp.File("base"), kGemma3_270m);
  auto model = Model::Load(tmp.File("base"));
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  ASSERT_EQ((*model)->config().num_layers, 18);

  // The real adapter_config.json with LoRA tensors of its rank for every target (PEFT's layout).
  Draft d;
  auto text = ReadTextFile(kRealConfigs + GetParam());
  ASSERT_TRUE(text.ok()) << text.status().ToString();
  d.config = ojson::parse(*text);
  const int r = d.config["r"].get<int>();
  const float scale = d.config["lora_alpha"].get<float>() / static_cast<float>(r);
  const auto targets = d.config["target_modules"].get<std::vector<std::string>>();
  for (int layer = 0; layer < 18; ++layer) {
    for (const auto& t : targets) {
      const auto [out, in] = kShapes.at(t);
      d.Add(Key(layer, t, "lora_A.weight"), {r, in}, 0.01f);
      d.Add(Key(layer, t, "lora_B.weight"), {out, r}, 0.02f);
    }
  }
  d.SetDType(DType::kBF16);
  WriteDraft(d, tmp.File("adapter"));
  auto adapter = Load(tmp.File("adapter"), **model, 0, GetParam());
  ASSERT_TRUE(adapter.ok()) << adapter.status().ToString();
  const Adapter& a = **adapter;
  ASSERT_EQ(a.modules().size(), 18 * targets.size());
  std::set<std::string> paths;
  for (const LoraWeights* lw : a.modules()) {
    paths.insert(lw->module_path);
    const std::string module = lw->module_path.substr(lw->module_path.rfind('.') + 1);
    const auto [out, in] = kShapes.at(module);
    EXPECT_EQ(lw->rank, r) << lw->module_path;
    EXPECT_FLOAT_EQ(lw->scale, scale) << lw->module_path;
    EXPECT_EQ(lw->a.shape, (std::vector<int64_t>{r, in})) << lw->module_path;
    EXPECT_EQ(lw->b.shape, (std::vector<int64_t>{out, r})) << lw->module_path;
  }
  for (int layer = 0; layer < 18; ++layer) {
    for (const auto& t : targets) {
      const std::string attn =
          t == "q_proj" || t == "k_proj" || t == "v_proj" || t == "o_proj" ? "self_attn" : "mlp";
      EXPECT_TRUE(paths.count("model.layers." + std::to_string(layer) + "." + attn + "." + t))
          << layer << " " << t;
    }
  }
  auto store = SafetensorsStore::Open(tmp.File("adapter") + "/adapter_model.safetensors");
  ASSERT_TRUE(store.ok());
  EXPECT_EQ(a.tensor_bytes(), (*store)->total_bytes());  // every tensor attached
  EXPECT_EQ(a.max_rank(), r);
}

INSTANTIATE_TEST_SUITE_P(Real, RealGemmaAdapterTest,
                         ::testing::Values("Ningguang826-LLM-gemma270m-svg-logo-lora__1.json",
                                           "0112LY-logo-gemma-lora__1.json"),
                         [](const auto& info) {
                           return info.param.substr(0, info.param.find('-'));
                         });

}  // namespace
}  // namespace loom
