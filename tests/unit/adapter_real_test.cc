// LoadAdapter on real fine-tunes: bases of their real shapes, the broken and foreign real adapters.
#include <algorithm>
#include <cstring>

#include "unit/adapter_test_util.h"

namespace loom {
namespace {
// ---------------------------------------------------------------------------------------
// Real adapters against bases of their model's real shapes.

// Published config.json of TinyLlama/TinyLlama-1.1B-Chat-v1.0 (values as on the hub).
const char kTinyLlamaConfig[] = R"({
  "architectures": ["LlamaForCausalLM"], "attention_bias": false, "bos_token_id": 1,
  "eos_token_id": 2, "hidden_act": "silu", "hidden_size": 2048, "initializer_range": 0.02,
  "intermediate_size": 5632, "max_position_embeddings": 2048, "model_type": "llama",
  "num_attention_heads": 32, "num_hidden_layers": 22, "num_key_value_heads": 4,
  "pretraining_tp": 1, "rms_norm_eps": 1e-05, "rope_scaling": null, "rope_theta": 10000.0,
  "tie_word_embeddings": false, "torch_dtype": "bfloat16", "transformers_version": "4.35.0",
  "use_cache": true, "vocab_size": 32000})";

// Published config.json of Qwen/Qwen2.5-0.5B-Instruct (values as on the hub).
const char kQwen25Config[] = R"({
  "architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 151643,
  "eos_token_id": 151645, "hidden_act": "silu", "hidden_size": 896, "initializer_range": 0.02,
  "intermediate_size": 4864, "max_position_embeddings": 32768, "max_window_layers": 21,
  "model_type": "qwen2", "num_attention_heads": 14, "num_hidden_layers": 24,
  "num_key_value_heads": 2, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
  "sliding_window": 32768, "tie_word_embeddings": true, "torch_dtype": "bfloat16",
  "transformers_version": "4.43.1", "use_cache": true, "use_sliding_window": false,
  "vocab_size": 151936})";

struct RealAdapterCase {
  std::string label;
  std::string folder;
  std::string config_json;  // config.json text of the base model, or "@" + a path to it
  int first_layer, last_layer;
  int rank;
  float scale;
  int64_t q_out, v_out, in;  // projection shapes of the real model
};

void PrintTo(const RealAdapterCase& c, std::ostream* os) { *os << c.folder; }

class RealAdapterTest : public ::testing::TestWithParam<RealAdapterCase> {};

TEST_P(RealAdapterTest, EveryTensorAttachedWithItsRankAndScale) {
  const RealAdapterCase& c = GetParam();
  TempDir tmp;
  std::string config_json = c.config_json;
  if (config_json.starts_with("@")) {
    auto text = ReadTextFile(config_json.substr(1));
    ASSERT_TRUE(text.ok()) << text.status().ToString();
    config_json = *text;
  }
  WriteShapeOnlyBase(tmp.File("base"), config_json);
  auto model = Model::Load(tmp.File("base"));
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  const ModelConfig& mc = (*model)->config();
  const std::string dir = kRealAdapters + c.folder;
  auto adapter = Load(dir, **model, 0, c.folder);
  ASSERT_TRUE(adapter.ok()) << adapter.status().ToString();
  const Adapter& a = **adapter;

  // Exactly q_proj and v_proj of layers first..last, nothing else.
  const int layers = c.last_layer - c.first_layer + 1;
  EXPECT_EQ(a.modules().size(), static_cast<size_t>(2 * layers));
  EXPECT_EQ(a.embedding(), nullptr);
  const SiteTable& sites = (*model)->sites();
  EXPECT_EQ(a.Find(sites.Find("lm_head")), nullptr);
  static const char* const kModules[] = {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
                                         "self_attn.o_proj", "mlp.gate_proj",    "mlp.up_proj",
                                         "mlp.down_proj"};
  EXPECT_EQ(sites.size(), mc.num_layers * 7 + 1);
  for (int layer = 0; layer < mc.num_layers; ++layer) {
    for (const char* mod : kModules) {
      const std::string path = "model.layers." + std::to_string(layer) + "." + mod;
      const int site = sites.Find(path);
      ASSERT_GE(site, 0) << path;
      const LoraWeights* lw = a.Find(site);
      const bool is_q = std::string(mod) == "self_attn.q_proj";
      const bool want = layer >= c.first_layer && layer <= c.last_layer &&
                        (is_q || std::string(mod) == "self_attn.v_proj");
      ASSERT_EQ(lw != nullptr, want) << path;
      if (!lw) continue;
      EXPECT_EQ(lw->module_path, path);
      EXPECT_EQ(lw->rank, c.rank);
      EXPECT_FLOAT_EQ(lw->scale, c.scale);
      EXPECT_EQ(lw->a.dtype, DType::kF32);
      EXPECT_EQ(lw->a.shape, (std::vector<int64_t>{c.rank, c.in}));
      EXPECT_EQ(lw->b.shape,
                (std::vector<int64_t>{is_q ? c.q_out : c.v_out, c.rank}));
      EXPECT_TRUE(lw->bias.empty());
      EXPECT_TRUE(lw->dora_gain.empty());
    }
  }
  EXPECT_EQ(a.max_rank(), c.rank);
  // Every byte of the file's tensors is attached, and the views point at the file's values.
  auto store = SafetensorsStore::Open(dir + "/adapter_model.safetensors");
  ASSERT_TRUE(store.ok());
  EXPECT_EQ((*store)->names().size(), static_cast<size_t>(4 * layers));
  EXPECT_EQ(a.tensor_bytes(), (*store)->total_bytes());
  const LoraWeights* first = a.Find(
      sites.Find("model.layers." + std::to_string(c.first_layer) + ".self_attn.v_proj"));
  ASSERT_NE(first, nullptr);
  const TensorInfo* b_info =
      (*store)->Find("base_model.model.model.layers." + std::to_string(c.first_layer) +
                     ".self_attn.v_proj.lora_B.weight");
  ASSERT_NE(b_info, nullptr);
  ASSERT_EQ(first->b.nbytes(), b_info->nbytes);
  EXPECT_EQ(std::memcmp(first->b.data, b_info->data, b_info->nbytes), 0);
  // A trained adapter: B is not the zero init.
  std::vector<float> b(static_cast<size_t>(first->b.numel()));
  ConvertToF32(first->b.dtype, first->b.data, b.data(), first->b.numel());
  float b_max = 0;
  for (float x : b) b_max = std::max(b_max, std::fabs(x));
  EXPECT_GT(b_max, 1e-4f);
}

std::string ReadOrEmpty(const std::string& path) {
  auto t = ReadTextFile(path);
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return t.ok() ? *t : "";
}

INSTANTIATE_TEST_SUITE_P(
    Real, RealAdapterTest,
    ::testing::Values(
        // SmolLM-135M: 30 layers, q [576, 576], v [192, 576]; r 16, alpha 32.
        RealAdapterCase{"SmolLM135M", "SmolLM-135M-Instruct__lora-r16-qv__TFM-HITESH-MedAI",
                        "@" + kShared + "model_configs/SmolLM-135M-sft/config.json", 0, 29, 16,
                        2.0f, 576, 192, 576},
        // TinyLlama-1.1B: q, v of layers 15..20 only (fully-qualified target names); r 8, alpha 16.
        RealAdapterCase{"TinyLlama11B",
                        "TinyLlama-1.1B-Chat-v1.0__lora-r8-qv-layers15-20__ccontreras17",
                        kTinyLlamaConfig, 15, 20, 8, 2.0f, 2048, 256, 2048},
        // Qwen2.5-0.5B: 24 layers, q [896, 896], v [128, 896]; r 8, alpha 16.
        RealAdapterCase{"Qwen25_05B", "Qwen2.5-0.5B-Instruct__lora-r8-qv__MuzammelMokhtar",
                        kQwen25Config, 0, 23, 8, 2.0f, 896, 128, 896}),
    [](const auto& info) { return info.param.label; });

TEST(RealAdapterTest, TinyLlamaAdapterOnTheQwenShapesNamesTheTensor) {
  // The right module names on the wrong model (layers 15..20 exist in Qwen2.5-0.5B too, at
  // width 896 instead of 2048): the shape check is what catches it.
  TempDir tmp;
  WriteShapeOnlyBase(tmp.File("base"), kQwen25Config);
  auto model = Model::Load(tmp.File("base"));
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  auto a = Load(kRealAdapters + "TinyLlama-1.1B-Chat-v1.0__lora-r8-qv-layers15-20__ccontreras17",
                **model, 0, "tl");
  ASSERT_FALSE(a.ok());
  EXPECT_TRUE(Contains(a.status().message(),
                       "adapter 'tl': tensor "
                       "base_model.model.model.layers.15.self_attn.q_proj.lora_A.weight "
                       "has shape [8, 2048], the base model needs [8, 896]"));
}

// SmolLM-135M with random non-zero bf16 weights (270 MB written to a temp dir): the real adapter
// moves the logits, and unmerged == merged within bf16 rounding of the merged weights.
TEST(RealAdapterTest, SmolLmAdapterChangesTheLogitsOfARandomBase) {
  const auto t0 = std::chrono::steady_clock::now();
  TempDir tmp;
  const std::string dir = tmp.File("smollm");
  fs::create_directories(dir);
  const std::string config_json =
      ReadOrEmpty(kShared + "model_configs/SmolLM-135M-sft/config.json");
  WriteBytes(dir + "/config.json", config_json);
  auto config = ParseModelConfig(config_json, "", "SmolLM config.json");
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  ModelWeights w;
  std::vector<TensorSpec> specs;
  for (const WeightSlot& slot : EnumerateWeights(*config, &w)) {
    if (slot.required) specs.push_back({slot.name, DType::kBF16, slot.shape});
  }
  uint64_t state = 0x9E3779B97F4A7C15ull;
  auto next = [&state] {  // xorshift64*: fast enough for 135M values
    state ^= state >> 12;
    state ^= state << 25;
    state ^= state >> 27;
    return static_cast<float>(((state * 0x2545F4914F6CDD1Dull) >> 40) * (1.0 / 16777216.0)) * 2.0f -
           1.0f;
  };
  auto next_bits = [&state] {
    state ^= state >> 12;
    state ^= state << 25;
    state ^= state >> 27;
    return state * 0x2545F4914F6CDD1Dull;
  };
  constexpr int64_t kRun = 4096;
  std::vector<uint16_t> norms(1 << 20), weights(1 << 20);
  for (size_t i = 0; i < norms.size(); ++i) {
    norms[i] = F32ToBf16(1.0f + 0.1f * next());
    weights[i] = F32ToBf16(0.05f * next());
  }
  Status st =
      WriteSafetensorsStreaming(dir + "/model.safetensors", specs, [&](size_t i, void* dst) {
        const TensorSpec& s = specs[i];
        int64_t n = 1;
        for (int64_t d : s.shape) n *= d;
        // Runs of 4096 values copied from a random offset of a table of 1 Mi random values:
        // one draw per value took 16 s of the test's 33 under the sanitizers.
        const std::vector<uint16_t>& table = s.shape.size() == 1 ? norms : weights;
        auto* out = static_cast<uint16_t*>(dst);
        for (int64_t k = 0; k < n; k += kRun) {
          const size_t at = static_cast<size_t>(next_bits() % (table.size() - kRun));
          std::memcpy(out + k, table.data() + at, sizeof(uint16_t) * std::min(kRun, n - k));
        }
        return OkStatus();
      });
  ASSERT_TRUE(st.ok()) << st.ToString();
  const double write_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  auto model = Model::Load(dir);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  auto adapter = Load(kRealAdapters + "SmolLM-135M-Instruct__lora-r16-qv__TFM-HITESH-MedAI",
                      **model, 0, "med");
  ASSERT_TRUE(adapter.ok()) << adapter.status().ToString();
  const std::vector<int32_t> prompt = {1, 504, 3157, 282, 260, 4477, 30, 49100};
  const auto base = PromptLogits(model->get(), nullptr, prompt);
  const auto unmerged = PromptLogits(model->get(), *adapter, prompt);
  auto merged_model = Model::Load(dir);
  ASSERT_TRUE(merged_model.ok());
  ASSERT_TRUE((*merged_model)->MergeAdapter(**adapter).ok());
  const auto merged = PromptLogits(merged_model->get(), nullptr, prompt);
  ASSERT_EQ(base.size(), prompt.size() * 49154u);
  float scale = 0;
  for (float x : base) scale = std::max(scale, std::fabs(x));
  const float delta = MaxAbsDiff(base, unmerged);
  const float merge_err = MaxAbsDiff(unmerged, merged);
  const double total_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf(
      "SmolLM random base: |logits| <= %.4f, adapter moves them by %.4f, unmerged vs merged "
      "%.5f; wrote 270 MB in %.1f s, whole test %.1f s\n",
      scale, delta, merge_err, write_s, total_s);
  EXPECT_GT(delta, 0.05f * scale);     // the adapter visibly changes the output
  EXPECT_LT(merge_err, 0.1f * delta);  // and the same change merged (bf16-rounded weights)
  EXPECT_GT(merge_err, 0.0f);          // merged really is another computation path
}

// ---------------------------------------------------------------------------------------
// The broken and foreign real adapters.

TEST(RealAdapterTest, EdgeAdaptersFailWithAClearMessage) {
  Model& model = FixtureModel("llama_f32");
  struct Edge {
    std::string folder;
    std::vector<std::string> needles;
  };
  for (const Edge& e : std::vector<Edge>{
           {"EDGE_gemma-3-270m__git-lfs-pointer-not-safetensors__Wiscarce",
            {"is a git-LFS pointer file, not the tensor data", "git lfs pull",
             "adapter_model.safetensors"}},
           {"EDGE_phi-2__git-lfs-pointer-not-safetensors__Nabeegh-Ahmed",
            {"is a git-LFS pointer file, not the tensor data", "adapter_model.safetensors"}},
           {"EDGE_nemotron__zero-byte-safetensors__Hastws",
            {"empty file (0 bytes), not a safetensors file", "adapter_model.safetensors"}},
           {"EDGE_Phi-3.5-mini__PROMPT_TUNING-not-lora__hazemzidan4545",
            {"peft_type PROMPT_TUNING is not supported", "peft_type LORA", "adapter_config.json"}},
       }) {
    SCOPED_TRACE(e.folder);
    auto a = Load(kRealAdapters + e.folder, model, 0, "edge");
    ASSERT_FALSE(a.ok());
    EXPECT_TRUE(Contains(a.status().message(), "adapter 'edge': "));
    EXPECT_TRUE(Contains(a.status().message(), kRealAdapters + e.folder));
    for (const auto& n : e.needles) EXPECT_TRUE(Contains(a.status().message(), n));
  }
}

TEST(RealAdapterTest, Gpt2Conv1dAdapterTargetsNothingOfALlama) {
  // GPT-2 c_attn (Conv1D, fan_in_fan_out): the target names no module loom's models have.
  auto a = Load(kRealAdapters + "gpt2__lora-r8-c_attn-fan_in_fan_out__jaisharmz",
                FixtureModel("llama_f32"), 0, "gpt2");
  ASSERT_FALSE(a.ok());
  EXPECT_TRUE(
      Contains(a.status().message(),
               "adapter 'gpt2': target_modules [c_attn] match no module of LlamaForCausalLM"));
}

TEST(RealAdapterTest, BertSequenceClassifierIsRejected) {
  // As saved: its classifier head is a modules_to_save module.
  const std::string dir = kRealAdapters + "bert-base-uncased__SEQ_CLS-lora-r8__Hareshjethani";
  auto a = Load(dir, FixtureModel("qwen2_f32"), 0, "bert");
  ASSERT_FALSE(a.ok());
  EXPECT_TRUE(Contains(a.status().message(), "adapter 'bert': "));
  EXPECT_TRUE(Contains(a.status().message(), "modules_to_save is not supported yet"));
  EXPECT_TRUE(Contains(a.status().message(), "classifier"));
  // Without modules_to_save, its classifier head is a tensor that is no LoRA tensor.
  TempDir tmp;
  Draft d = ReadDraft(dir);
  d.config.erase("modules_to_save");
  WriteDraft(d, tmp.File("bert"));
  auto b = Load(tmp.File("bert"), FixtureModel("qwen2_f32"), 0, "bert");
  ASSERT_FALSE(b.ok());
  EXPECT_TRUE(Contains(b.status().message(), "tensor base_model.model.classifier.bias in "));
  EXPECT_TRUE(Contains(b.status().message(), "is not a LoRA tensor"));
  // Without the head, its LoRA targets (BERT query / value) match nothing of the model.
  d.Remove("base_model.model.classifier.bias");
  d.Remove("base_model.model.classifier.weight");
  WriteDraft(d, tmp.File("bert1"));
  auto b1 = Load(tmp.File("bert1"), FixtureModel("qwen2_f32"), 0, "bert");
  ASSERT_FALSE(b1.ok());
  EXPECT_TRUE(Contains(b1.status().message(),
                       "target_modules [query, value] match no module of Qwen2ForCausalLM"));
  // And with a target it does match, the BERT tensors name their foreign module.
  d.config["target_modules"] = "all-linear";
  WriteDraft(d, tmp.File("bert2"));
  auto c = Load(tmp.File("bert2"), FixtureModel("qwen2_f32"), 0, "bert");
  ASSERT_FALSE(c.ok());
  EXPECT_TRUE(
      Contains(c.status().message(), "adapts module 'bert.encoder.layer.0.attention.self.query'"));
  EXPECT_TRUE(Contains(c.status().message(), "which Qwen2ForCausalLM does not have"));
}

TEST(RealAdapterTest, RealConfigsForOtherArchitecturesAreRejectedAtLoad) {
  // Configs ParseLoraConfig accepts but whose targets name no Llama-family module (T5, ChatGLM,
  // phi, Falcon, FLUX): put with real LoRA tensors next to a model, they are refused by name.
  Model& model = FixtureModel("llama_f32");
  const Draft fixture = ReadDraft(kAdapters + "llama_qv_r8_f32");
  for (const char* file :
       {"3L0L0-FLAN-T5-Motivation-Model__1.json", "BooniesFX-ChatGLM-Efficient-Tuning__1.json",
        "EDLlyc-kangya-glm4-lora__1.json", "GowthamNats-MicrosoftPhi1_5_finetuned-__1.json",
        "I-Quit-Bro-flan-t5-large-finetuned__1.json",
        "MountainAlpha-falcon-7b_lora_finetune__1.json",
        "Nabeegh-Ahmed-phi-2-coding-expert__1.json", "bikav-ChatGLM-6b_LoRA__1.json",
        "gluttony-10-ChatGLM-Lora__1.json", "huggingface-peft__8.json",
        "zy-fun-peft-lora-flan__1.json"}) {
    SCOPED_TRACE(file);
    TempDir tmp;
    Draft d = fixture;
    d.config = ojson::parse(ReadOrEmpty(kRealConfigs + file));
    WriteDraft(d, tmp.File("a"));
    auto a = Load(tmp.File("a"), model);
    ASSERT_FALSE(a.ok());
    EXPECT_TRUE(Contains(a.status().message(), "match no module of LlamaForCausalLM"));
    const auto& targets = d.config["target_modules"];
    EXPECT_TRUE(Contains(a.status().message(), targets[0].get<std::string>()));
  }
}

}  // namespace
}  // namespace loom
