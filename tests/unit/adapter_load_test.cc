// Tests of LoadAdapter: real fine-tunes against bases of their real shapes, the broken real
// adapters, every corruption of a fixture adapter with its message, file dtypes, content_hash.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "base/mmap_file.h"
#include "engine/engine.h"
#include "io/safetensors.h"
#include "lora/adapter.h"
#include "lora/merge.h"
#include "model/model.h"
#include "model/weights.h"

namespace loom {
namespace {

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

const std::string kAdapters = std::string(LOOM_FIXTURES) + "/adapters/";
const std::string kModels = std::string(LOOM_FIXTURES) + "/models/";
const std::string kShared = std::string(LOOM_FIXTURES) + "/shared/";
const std::string kRealAdapters = kShared + "adapters/";
const std::string kRealConfigs = kShared + "adapter_configs/";

::testing::AssertionResult Contains(const std::string& text, const std::string& part) {
  if (text.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "'" << part << "' not in: " << text;
}

// A fresh folder under the system temp dir, removed at the end of the test.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "loom_adapter_XXXXXX").string();
    char* p = mkdtemp(tmpl.data());
    EXPECT_NE(p, nullptr) << "mkdtemp failed for " << tmpl;
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string File(const std::string& name) const { return (fs::path(path_) / name).string(); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << "cannot write " << path;
}

std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

float MaxAbsDiff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  float m = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

// ---------------------------------------------------------------------------------------
// An adapter folder held in memory: config plus tensors as f32 values with a file dtype.

struct DraftTensor {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  std::vector<float> values;  // numel values, rounded to `dtype` when written
};

struct Draft {
  ojson config;
  std::vector<DraftTensor> tensors;

  DraftTensor* Find(const std::string& name) {
    for (auto& t : tensors) {
      if (t.name == name) return &t;
    }
    ADD_FAILURE() << "no tensor " << name;
    return nullptr;
  }
  void Remove(const std::string& name) {
    const size_t before = tensors.size();
    std::erase_if(tensors, [&](const DraftTensor& t) { return t.name == name; });
    EXPECT_EQ(tensors.size() + 1, before) << "no tensor " << name;
  }
  void Add(const std::string& name, std::vector<int64_t> shape, float fill = 0.25f) {
    DraftTensor t{name, DType::kF32, shape, {}};
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    t.values.assign(static_cast<size_t>(n), fill);
    tensors.push_back(std::move(t));
  }
  void SetDType(DType dtype) {
    for (auto& t : tensors) t.dtype = dtype;
  }
};

Draft ReadDraft(const std::string& dir) {
  Draft d;
  auto text = ReadTextFile(dir + "/adapter_config.json");
  EXPECT_TRUE(text.ok()) << text.status().ToString();
  d.config = ojson::parse(*text);
  auto store = SafetensorsStore::Open(dir + "/adapter_model.safetensors");
  EXPECT_TRUE(store.ok()) << store.status().ToString();
  for (const std::string& name : (*store)->names()) {
    auto t = (*store)->Get(name);
    EXPECT_TRUE(t.ok()) << t.status().ToString();
    DraftTensor dt{name, t->dtype, t->shape, std::vector<float>(static_cast<size_t>(t->numel()))};
    ConvertToF32(t->dtype, t->data, dt.values.data(), t->numel());
    d.tensors.push_back(std::move(dt));
  }
  return d;
}

void WriteDraft(const Draft& d, const std::string& dir) {
  fs::create_directories(dir);
  WriteBytes(dir + "/adapter_config.json", d.config.dump(2));
  std::vector<std::vector<uint8_t>> bytes;
  std::vector<TensorToWrite> tensors;
  for (const auto& t : d.tensors) {
    bytes.emplace_back(t.values.size() * DTypeSize(t.dtype));
    ConvertFromF32(t.dtype, t.values.data(), bytes.back().data(),
                   static_cast<int64_t>(t.values.size()));
  }
  for (size_t i = 0; i < d.tensors.size(); ++i) {
    tensors.push_back({d.tensors[i].name, d.tensors[i].dtype, d.tensors[i].shape, bytes[i].data()});
  }
  Status st = WriteSafetensors(dir + "/adapter_model.safetensors", tensors);
  ASSERT_TRUE(st.ok()) << st.ToString();
}

// "base_model.model.model.layers.L.self_attn.M.PART"
std::string Key(int layer, const std::string& module, const std::string& part) {
  const bool attn =
      module == "q_proj" || module == "k_proj" || module == "v_proj" || module == "o_proj";
  return "base_model.model.model.layers." + std::to_string(layer) +
         (attn ? ".self_attn." : ".mlp.") + module + "." + part;
}

// The tiny fixture base models, loaded once.
Model& FixtureModel(const std::string& name) {
  static std::map<std::string, std::unique_ptr<Model>> models;
  auto& m = models[name];
  if (!m) {
    auto loaded = Model::Load(kModels + name);
    EXPECT_TRUE(loaded.ok()) << loaded.status().ToString();
    m = std::move(loaded).value();
  }
  return *m;
}

StatusOr<std::shared_ptr<const Adapter>> Load(const std::string& dir, const Model& model,
                                              int max_rank = 0, const std::string& name = "bad") {
  return LoadAdapter(name, dir, model.config(), model.weights(), max_rank);
}

// Prompt logits [prompt_len * vocab] of `model` with `adapter` (null = base) applied unmerged.
std::vector<float> PromptLogits(Model* model, std::shared_ptr<const Adapter> adapter,
                                const std::vector<int32_t>& prompt) {
  EngineOptions options;
  options.kv_cache_tokens = 256;
  Engine engine(model, options);
  GenerationRequest r;
  r.prompt = prompt;
  r.params.temperature = 0;
  r.params.max_tokens = 1;
  r.params.ignore_eos = true;
  r.return_prompt_logits = true;
  if (adapter) r.adapter_slot = engine.AddAdapter(adapter);
  EXPECT_TRUE(engine.Add(r).ok());
  auto res = engine.RunToCompletion();
  EXPECT_EQ(res.size(), 1u);
  return res.empty() ? std::vector<float>{} : res[0].prompt_logits;
}

const std::vector<int32_t> kPrompt = {1, 5, 9, 200, 17, 33};

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

// Writes DIR/config.json and DIR/model.safetensors: a BF16 header for every weight of the
// config and a data section that is a hole (the file is extended, not written), so a 1B model
// costs a few KiB of disk and Model::Load maps zeros. LoadAdapter only needs the shapes.
void WriteShapeOnlyBase(const std::string& dir, const std::string& config_json) {
  fs::create_directories(dir);
  WriteBytes(dir + "/config.json", config_json);
  auto config = ParseModelConfig(config_json, "", dir + "/config.json");
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  ModelWeights w;
  nlohmann::json header = nlohmann::json::object();
  uint64_t offset = 0;
  for (const WeightSlot& slot : EnumerateWeights(*config, &w)) {
    if (!slot.required) continue;  // tied lm_head
    uint64_t n = 2;
    for (int64_t d : slot.shape) n *= static_cast<uint64_t>(d);
    header[slot.name] = {
        {"dtype", "BF16"}, {"shape", slot.shape}, {"data_offsets", {offset, offset + n}}};
    offset += n;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::string prefix(8, '\0');
  for (int i = 0; i < 8; ++i)
    prefix[static_cast<size_t>(i)] = static_cast<char>((text.size() >> (8 * i)) & 0xff);
  const std::string path = dir + "/model.safetensors";
  WriteBytes(path, prefix + text);
  fs::resize_file(path, 8 + text.size() + offset);  // sparse: no data blocks are written
}

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
  EXPECT_EQ(a.Find(LoraSite{-1, LoraModule::kQ, true}), nullptr);
  for (int layer = 0; layer < mc.num_layers; ++layer) {
    for (int m = 0; m < kLoraModulesPerLayer; ++m) {
      const LoraModule mod = static_cast<LoraModule>(m);
      const LoraWeights* lw = a.Find(LoraSite{layer, mod, false});
      const bool want = layer >= c.first_layer && layer <= c.last_layer &&
                        (mod == LoraModule::kQ || mod == LoraModule::kV);
      ASSERT_EQ(lw != nullptr, want) << "layer " << layer << " " << LoraModuleName(mod);
      if (!lw) continue;
      EXPECT_EQ(lw->module_path,
                "model.layers." + std::to_string(layer) + ".self_attn." + LoraModuleName(mod));
      EXPECT_EQ(lw->rank, c.rank);
      EXPECT_FLOAT_EQ(lw->scale, c.scale);
      EXPECT_EQ(lw->a.dtype, DType::kF32);
      EXPECT_EQ(lw->a.shape, (std::vector<int64_t>{c.rank, c.in}));
      EXPECT_EQ(lw->b.shape,
                (std::vector<int64_t>{mod == LoraModule::kQ ? c.q_out : c.v_out, c.rank}));
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
  const LoraWeights* first = a.Find(LoraSite{c.first_layer, LoraModule::kV, false});
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
  Status st =
      WriteSafetensorsStreaming(dir + "/model.safetensors", specs, [&](size_t i, void* dst) {
        const TensorSpec& s = specs[i];
        int64_t n = 1;
        for (int64_t d : s.shape) n *= d;
        const bool norm = s.shape.size() == 1;
        const float amp = norm ? 0.1f : 0.05f;
        auto* out = static_cast<uint16_t*>(dst);
        for (int64_t k = 0; k < n; ++k) out[k] = F32ToBf16((norm ? 1.0f : 0.0f) + amp * next());
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

// ---------------------------------------------------------------------------------------
// Corrupted copies of tests/fixtures/adapters/llama_qv_r8_f32 (r 8, alpha 16, q and v of 3
// layers) on tests/fixtures/models/llama_f32 (d 64, q out 64, v out 32).

class CorruptAdapterTest : public ::testing::Test {
 protected:
  void SetUp() override { draft_ = ReadDraft(kAdapters + "llama_qv_r8_f32"); }

  // Writes the draft and expects LoadAdapter to fail with every needle in its message.
  void ExpectRejected(const std::vector<std::string>& needles, int max_rank = 0) {
    const std::string dir = tmp_.File("bad");
    WriteDraft(draft_, dir);
    auto a = Load(dir, FixtureModel("llama_f32"), max_rank);
    ASSERT_FALSE(a.ok()) << "accepted";
    EXPECT_EQ(a.status().message().rfind("adapter 'bad': ", 0), 0u) << a.status().message();
    for (const auto& n : needles) EXPECT_TRUE(Contains(a.status().message(), n));
  }

  Draft draft_;
  TempDir tmp_;
};

TEST_F(CorruptAdapterTest, TheUnmodifiedFixtureLoads) {
  WriteDraft(draft_, tmp_.File("good"));
  auto a = Load(tmp_.File("good"), FixtureModel("llama_f32"));
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ((*a)->modules().size(), 6u);
}

TEST_F(CorruptAdapterTest, WrongShapeOfA) {
  DraftTensor* t = draft_.Find(Key(1, "v_proj", "lora_A.weight"));
  t->shape = {8, 63};
  t->values.resize(8 * 63);
  ExpectRejected({"tensor " + Key(1, "v_proj", "lora_A.weight") +
                      " has shape [8, 63], the base model needs [8, 64]",
                  "adapter trained for another base model"});
}

TEST_F(CorruptAdapterTest, WrongShapeOfB) {
  DraftTensor* t = draft_.Find(Key(2, "q_proj", "lora_B.weight"));
  t->shape = {65, 8};
  t->values.resize(65 * 8);
  ExpectRejected({"tensor " + Key(2, "q_proj", "lora_B.weight") +
                  " has shape [65, 8], the base model needs [64, 8]"});
}

TEST_F(CorruptAdapterTest, RankOfTheTensorsDiffersFromConfigR) {
  draft_.config["r"] = 4;
  ExpectRejected({"tensor " + Key(0, "q_proj", "lora_A.weight") +
                      " has shape [8, 64], the base model needs [4, 64]",
                  "r/rank_pattern wrong"});
}

TEST_F(CorruptAdapterTest, RankPatternDisagreesWithOneModule) {
  draft_.config["rank_pattern"] = {{"model.layers.2.self_attn.v_proj", 4}};
  ExpectRejected({"tensor " + Key(2, "v_proj", "lora_A.weight") +
                  " has shape [8, 64], the base model needs [4, 64]"});
}

TEST_F(CorruptAdapterTest, AWithoutB) {
  draft_.Remove(Key(1, "q_proj", "lora_B.weight"));
  ExpectRejected({"module 'model.layers.1.self_attn.q_proj' has " +
                  Key(1, "q_proj", "lora_A.weight") + " but no lora_B tensor"});
}

TEST_F(CorruptAdapterTest, BWithoutA) {
  draft_.Remove(Key(1, "q_proj", "lora_A.weight"));
  ExpectRejected({"module 'model.layers.1.self_attn.q_proj' has " +
                  Key(1, "q_proj", "lora_B.weight") + " but no lora_A tensor"});
}

TEST_F(CorruptAdapterTest, TargetedModuleWithoutTensors) {
  draft_.Remove(Key(2, "v_proj", "lora_A.weight"));
  draft_.Remove(Key(2, "v_proj", "lora_B.weight"));
  ExpectRejected({"adapter_config.json targets 'model.layers.2.self_attn.v_proj' but ",
                  "has no tensors for it"});
}

TEST_F(CorruptAdapterTest, OrphanNonLoraTensor) {
  draft_.Add("base_model.model.model.layers.0.self_attn.q_proj.weight", {64, 64});
  ExpectRejected({"tensor base_model.model.model.layers.0.self_attn.q_proj.weight in ",
                  "is not a LoRA tensor"});
}

TEST_F(CorruptAdapterTest, OrphanLoraForAModuleTheConfigDoesNotTarget) {
  draft_.Add(Key(0, "k_proj", "lora_A.weight"), {8, 64});
  draft_.Add(Key(0, "k_proj", "lora_B.weight"), {32, 8});
  ExpectRejected(
      {"tensor " + Key(0, "k_proj", "lora_A.weight") +
       " adapts 'model.layers.0.self_attn.k_proj', which adapter_config.json does not target"});
}

TEST_F(CorruptAdapterTest, OrphanLoraForALayerTheModelLacks) {
  draft_.Add(Key(99, "q_proj", "lora_A.weight"), {8, 64});
  draft_.Add(Key(99, "q_proj", "lora_B.weight"), {64, 8});
  ExpectRejected(
      {"tensor " + Key(99, "q_proj", "lora_A.weight") +
       " adapts module 'model.layers.99.self_attn.q_proj', which LlamaForCausalLM does not have"});
}

TEST_F(CorruptAdapterTest, OrphanLoraForAModuleNameTheModelLacks) {
  draft_.Add("base_model.model.model.layers.0.self_attn.qkv_proj.lora_A.weight", {8, 64});
  ExpectRejected(
      {"adapts module 'model.layers.0.self_attn.qkv_proj', which LlamaForCausalLM does not have"});
}

TEST_F(CorruptAdapterTest, EmbeddingLoraOnALinearProjection) {
  draft_.Add(Key(0, "q_proj", "lora_embedding_A"), {8, 256});
  ExpectRejected(
      {"tensor " + Key(0, "q_proj", "lora_embedding_A") +
       " is an embedding LoRA on 'model.layers.0.self_attn.q_proj', which is a linear projection"});
}

TEST_F(CorruptAdapterTest, SameWeightTwice) {
  draft_.Add(Key(0, "q_proj", "lora_A.default.weight"), {8, 64});
  ExpectRejected({"tensors " + Key(0, "q_proj", "lora_A.default.weight") + " and " +
                  Key(0, "q_proj", "lora_A.weight") + " are the same weight"});
}

TEST_F(CorruptAdapterTest, UnexpectedTensorNameAfterTheLoraPart) {
  draft_.Add(Key(0, "q_proj", "lora_A.weight.extra"), {8, 64});
  ExpectRejected({"tensor " + Key(0, "q_proj", "lora_A.weight.extra") + " has an unexpected name"});
}

TEST_F(CorruptAdapterTest, ZeroTensors) {
  draft_.tensors.clear();
  ExpectRejected({"adapter_model.safetensors holds no tensors; the adapter would change nothing"});
}

TEST_F(CorruptAdapterTest, TwoEmbeddedAdapterNames) {
  for (auto& t : draft_.tensors) {
    const bool layer1 = t.name.find(".layers.1.") != std::string::npos;
    for (const char* part : {".lora_A.weight", ".lora_B.weight"}) {
      const size_t at = t.name.find(part);
      if (at != std::string::npos) {
        t.name.replace(at, std::strlen(part),
                       std::string(part).replace(7, 0, layer1 ? ".other" : ".default"));
      }
    }
  }
  ExpectRejected(
      {"tensors name two adapters ('default' and 'other'); save one adapter per folder"});
}

TEST_F(CorruptAdapterTest, LoraBiasFlagWithoutBiasTensor) {
  draft_.config["lora_bias"] = true;
  ExpectRejected(
      {"module 'model.layers.0.self_attn.q_proj' has no lora_B.bias but lora_bias is true"});
}

TEST_F(CorruptAdapterTest, BiasTensorWithoutLoraBiasFlag) {
  draft_.Add(Key(1, "v_proj", "lora_B.bias"), {32});
  ExpectRejected(
      {"module 'model.layers.1.self_attn.v_proj' has a lora_B.bias but lora_bias is false"});
}

TEST_F(CorruptAdapterTest, UseDoraWithoutMagnitude) {
  draft_.config["use_dora"] = true;
  ExpectRejected(
      {"module 'model.layers.0.self_attn.q_proj' has no lora_magnitude_vector but use_dora is "
       "true"});
}

TEST_F(CorruptAdapterTest, MagnitudeWithoutUseDora) {
  draft_.Add(Key(2, "q_proj", "lora_magnitude_vector"), {64}, 1.0f);
  ExpectRejected(
      {"module 'model.layers.2.self_attn.q_proj' has a lora_magnitude_vector but use_dora is "
       "false"});
}

TEST_F(CorruptAdapterTest, DoraTogetherWithLoraBias) {
  draft_.config["use_dora"] = true;
  draft_.config["lora_bias"] = true;
  ExpectRejected({"use_dora together with lora_bias is not supported yet"});
}

TEST(CorruptAdapterFileTest, MagnitudeVectorOnAnEmbedding) {
  Draft d = ReadDraft(kAdapters + "llama_embed");
  d.Add("base_model.model.model.embed_tokens.lora_magnitude_vector", {256}, 1.0f);
  TempDir tmp;
  WriteDraft(d, tmp.File("a"));
  auto a = Load(tmp.File("a"), FixtureModel("llama_f32"));
  ASSERT_FALSE(a.ok());
  EXPECT_TRUE(Contains(a.status().message(),
                       "adapter 'bad': tensor "
                       "base_model.model.model.embed_tokens.lora_magnitude_vector is not "
                       "valid on an embedding"));
}

TEST_F(CorruptAdapterTest, BaseLayerCopyOfALinearIsAModulesToSaveStyleReplacement) {
  draft_.Add(Key(0, "q_proj", "base_layer.weight"), {64, 64});
  ExpectRejected({"tensor " + Key(0, "q_proj", "base_layer.weight") +
                  " replaces a base weight (modules_to_save-style); not supported yet"});
}

TEST_F(CorruptAdapterTest, MaxLoraRankExceeded) {
  ExpectRejected({"rank 8 of 'model.layers.0.self_attn.q_proj' exceeds --max-lora-rank 4"}, 4);
  // At the limit it loads.
  auto a = Load(tmp_.File("bad"), FixtureModel("llama_f32"), 8);
  EXPECT_TRUE(a.ok()) << a.status().ToString();
}

TEST(CorruptAdapterFileTest, BaseLayerCopyThatDiffersFromTheServedModel) {
  // PEFT's default save of an embedding LoRA stores embed_tokens.base_layer.weight: it must be
  // the served model's table.
  Model& model = FixtureModel("llama_f32");
  const std::string name = "base_model.model.model.embed_tokens.base_layer.weight";
  Draft d = ReadDraft(kAdapters + "llama_embed_peft_default_save");
  TempDir tmp;
  WriteDraft(d, tmp.File("same"));
  auto same = Load(tmp.File("same"), model);
  ASSERT_TRUE(same.ok()) << same.status().ToString();
  EXPECT_NE((*same)->embedding(), nullptr);
  d.Find(name)->values[777] += 0.5f;
  WriteDraft(d, tmp.File("differs"));
  auto differs = Load(tmp.File("differs"), model);
  ASSERT_FALSE(differs.ok());
  EXPECT_TRUE(Contains(
      differs.status().message(),
      "tensor " + name + " is a copy of the base weight that differs from the served model's"));
  // A copy of another shape.
  DraftTensor* t = d.Find(name);
  t->shape = {255, 64};
  t->values.resize(255 * 64);
  WriteDraft(d, tmp.File("shape"));
  auto shape = Load(tmp.File("shape"), model);
  ASSERT_FALSE(shape.ok());
  EXPECT_TRUE(Contains(shape.status().message(),
                       "tensor " + name + " has shape [255, 64], the base weight is [256, 64]"));
}

// Rewrites the header of a safetensors file with `edit`, keeping the data bytes.
void EditHeader(const std::string& path, const std::function<void(nlohmann::json&)>& edit) {
  const std::string raw = ReadBytes(path);
  uint64_t len = 0;
  for (int i = 7; i >= 0; --i) len = (len << 8) | static_cast<uint8_t>(raw[static_cast<size_t>(i)]);
  nlohmann::json header = nlohmann::json::parse(raw.substr(8, len));
  edit(header);
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::string prefix(8, '\0');
  for (int i = 0; i < 8; ++i)
    prefix[static_cast<size_t>(i)] = static_cast<char>((text.size() >> (8 * i)) & 0xff);
  WriteBytes(path, prefix + text + raw.substr(8 + len));
}

TEST(CorruptAdapterFileTest, MislabeledDTypesAreSizeMismatches) {
  // Header dtype and data size disagree: never read at the wrong element size.
  struct Case {
    DType written;
    const char* label;
    const char* needle;
  };
  const std::string tensor = Key(0, "v_proj", "lora_B.weight");  // [32, 8]
  for (const Case& c :
       {Case{DType::kF32, "F16", "shape [32, 8] × F16 needs 512 bytes but data_offsets span 1024"},
        Case{DType::kF32, "BF16",
             "shape [32, 8] × BF16 needs 512 bytes but data_offsets span 1024"},
        Case{DType::kF16, "F32", "shape [32, 8] × F32 needs 1024 bytes but data_offsets span 512"},
        Case{DType::kBF16, "F32",
             "shape [32, 8] × F32 needs 1024 bytes but data_offsets span 512"}}) {
    SCOPED_TRACE(std::string(DTypeName(c.written)) + " labeled " + c.label);
    Draft d = ReadDraft(kAdapters + "llama_qv_r8_f32");
    d.SetDType(c.written);
    TempDir tmp;
    WriteDraft(d, tmp.File("a"));
    const std::string path = tmp.File("a") + "/adapter_model.safetensors";
    EditHeader(path, [&](nlohmann::json& h) { h[tensor]["dtype"] = c.label; });
    auto a = Load(tmp.File("a"), FixtureModel("llama_f32"));
    ASSERT_FALSE(a.ok());
    EXPECT_TRUE(
        Contains(a.status().message(), "adapter 'bad': " + path + ": tensor '" + tensor + "': "));
    EXPECT_TRUE(Contains(a.status().message(), c.needle));
  }
}

TEST(CorruptAdapterFileTest, TruncatedSafetensors) {
  Draft d = ReadDraft(kAdapters + "llama_qv_r8_f32");
  TempDir tmp;
  WriteDraft(d, tmp.File("a"));
  const std::string path = tmp.File("a") + "/adapter_model.safetensors";
  const std::string full = ReadBytes(path);
  struct Cut {
    size_t keep;
    std::string needle;
  };
  for (const Cut& c : {Cut{full.size() - 100, "out of range (data section is"},
                       Cut{100, "exceeds the file size 100"},
                       Cut{5, "file is 5 bytes, too short for a safetensors header"}}) {
    SCOPED_TRACE(c.keep);
    WriteBytes(path, full.substr(0, c.keep));
    auto a = Load(tmp.File("a"), FixtureModel("llama_f32"));
    ASSERT_FALSE(a.ok());
    EXPECT_TRUE(Contains(a.status().message(), "adapter 'bad': " + path));
    EXPECT_TRUE(Contains(a.status().message(), c.needle));
  }
}

TEST(CorruptAdapterFileTest, PickleOnlyAndMissingFiles) {
  Model& model = FixtureModel("llama_f32");
  Draft d = ReadDraft(kAdapters + "llama_qv_r8_f32");
  TempDir tmp;
  const std::string dir = tmp.File("a");
  WriteDraft(d, dir);
  fs::remove(dir + "/adapter_model.safetensors");
  WriteBytes(dir + "/adapter_model.bin", std::string("PK\x03\x04", 4) + "archive/data.pkl");
  auto bin = Load(dir, model);
  ASSERT_FALSE(bin.ok());
  EXPECT_TRUE(
      Contains(bin.status().message(),
               "adapter 'bad': " + dir +
                   " has only adapter_model.bin, a pickle file that could run arbitrary code"));
  EXPECT_TRUE(Contains(bin.status().message(), "Re-save the adapter with safetensors"));

  fs::remove(dir + "/adapter_model.bin");
  auto none = Load(dir, model);
  ASSERT_FALSE(none.ok());
  EXPECT_TRUE(Contains(none.status().message(),
                       "adapter 'bad': " + dir + "/adapter_model.safetensors: no such file"));

  WriteDraft(d, dir);
  fs::remove(dir + "/adapter_config.json");
  auto no_config = Load(dir, model);
  ASSERT_FALSE(no_config.ok());
  EXPECT_TRUE(Contains(no_config.status().message(),
                       "adapter 'bad': " + dir + "/adapter_config.json: no such file"));

  auto not_dir = Load(tmp.File("missing"), model);
  ASSERT_FALSE(not_dir.ok());
  EXPECT_TRUE(Contains(not_dir.status().message(), tmp.File("missing") + " is not a folder"));
}

// ---------------------------------------------------------------------------------------
// Accepted key forms and dtypes: the same adapter gives the same logits.

TEST(AdapterFormsTest, PrefixlessEmbeddedNameAndBinBesideSafetensorsGiveTheSameLogits) {
  Model& model = FixtureModel("llama_f32");
  auto ref_adapter = Load(kAdapters + "llama_qv_r8_f32", model);
  ASSERT_TRUE(ref_adapter.ok());
  const auto base = PromptLogits(&model, nullptr, kPrompt);
  const auto ref = PromptLogits(&model, *ref_adapter, kPrompt);
  ASSERT_GT(MaxAbsDiff(base, ref), 0.1f);  // the adapter is applied

  TempDir tmp;
  const Draft fixture = ReadDraft(kAdapters + "llama_qv_r8_f32");
  Draft no_prefix = fixture;
  for (auto& t : no_prefix.tensors) t.name = t.name.substr(std::strlen("base_model.model."));
  Draft named = fixture;  // raw PeftModel state dict: lora_A.default.weight
  for (auto& t : named.tensors) t.name.insert(t.name.rfind(".weight"), ".default");
  std::vector<std::pair<std::string, Draft>> forms = {{"no_prefix", no_prefix}, {"named", named}};
  for (const auto& [label, draft] : forms) {
    SCOPED_TRACE(label);
    WriteDraft(draft, tmp.File(label));
    auto a = Load(tmp.File(label), model);
    ASSERT_TRUE(a.ok()) << a.status().ToString();
    EXPECT_EQ((*a)->modules().size(), 6u);
    EXPECT_EQ(MaxAbsDiff(PromptLogits(&model, *a, kPrompt), ref), 0.0f);
  }
  // adapter_model.bin next to the safetensors: never opened, the safetensors is used.
  WriteDraft(fixture, tmp.File("both"));
  WriteBytes(tmp.File("both") + "/adapter_model.bin", "not a pickle at all");
  auto both = Load(tmp.File("both"), model);
  ASSERT_TRUE(both.ok()) << both.status().ToString();
  EXPECT_EQ(MaxAbsDiff(PromptLogits(&model, *both, kPrompt), ref), 0.0f);
}

TEST(AdapterFormsTest, F32F16Bf16FilesOfOneAdapterGiveTheSameLogits) {
  // The classic bug: F32 read as 2-byte elements (or halves read as floats) loads "fine" and
  // serves garbage. Each dtype is compared with an F32 file holding the same rounded values
  // (equal up to accumulation order), and with the original (within the dtype's rounding).
  Model& model = FixtureModel("llama_f32");
  const Draft fixture = ReadDraft(kAdapters + "llama_qv_r8_f32");
  TempDir tmp;
  auto logits_of = [&](const Draft& d, const std::string& label) {
    WriteDraft(d, tmp.File(label));
    auto a = Load(tmp.File(label), model);
    EXPECT_TRUE(a.ok()) << a.status().ToString();
    return a.ok() ? PromptLogits(&model, *a, kPrompt) : std::vector<float>{};
  };
  const auto base = PromptLogits(&model, nullptr, kPrompt);
  const auto f32 = logits_of(fixture, "f32");
  const float delta = MaxAbsDiff(base, f32);
  ASSERT_GT(delta, 0.1f);
  struct Want {
    DType dtype;
    float vs_original;  // × delta: the effect of rounding A and B to the dtype
  };
  for (const Want& w : {Want{DType::kF16, 2e-3f}, Want{DType::kBF16, 2e-2f}}) {
    SCOPED_TRACE(DTypeName(w.dtype));
    Draft half = fixture;
    half.SetDType(w.dtype);
    Draft rounded = fixture;  // F32 file with the values the half file holds
    for (auto& t : rounded.tensors) {
      std::vector<uint8_t> tmp_bytes(t.values.size() * 2);
      ConvertFromF32(w.dtype, t.values.data(), tmp_bytes.data(),
                     static_cast<int64_t>(t.values.size()));
      ConvertToF32(w.dtype, tmp_bytes.data(), t.values.data(),
                   static_cast<int64_t>(t.values.size()));
    }
    const auto half_logits = logits_of(half, std::string("half_") + DTypeName(w.dtype));
    const auto rounded_logits = logits_of(rounded, std::string("rounded_") + DTypeName(w.dtype));
    EXPECT_LE(MaxAbsDiff(half_logits, rounded_logits), 1e-5f * delta);
    EXPECT_LE(MaxAbsDiff(half_logits, f32), w.vs_original * delta);
    EXPECT_GT(MaxAbsDiff(half_logits, f32), 0.0f);  // it really is the rounded adapter
    auto a = Load(tmp.File(std::string("half_") + DTypeName(w.dtype)), model);
    ASSERT_TRUE(a.ok());
    EXPECT_EQ((*a)->modules().front()->a.dtype, w.dtype);
  }
}

// ---------------------------------------------------------------------------------------
// Identity: the hash of the files' bytes.

TEST(AdapterHashTest, SameBytesSameHashAnyChangeANewOne) {
  Model& model = FixtureModel("llama_f32");
  TempDir tmp;
  const Draft fixture = ReadDraft(kAdapters + "llama_qv_r8_f32");
  WriteDraft(fixture, tmp.File("a"));
  fs::copy(tmp.File("a"), tmp.File("copy"));
  auto hash = [&](const std::string& dir) {
    auto a = Load(dir, model);
    EXPECT_TRUE(a.ok()) << a.status().ToString();
    return a.ok() ? (*a)->content_hash() : 0;
  };
  const uint64_t h = hash(tmp.File("a"));
  EXPECT_NE(h, 0u);
  EXPECT_EQ(hash(tmp.File("a")), h);     // reload
  EXPECT_EQ(hash(tmp.File("copy")), h);  // same bytes elsewhere: same identity

  // One byte of one tensor changed (the last byte of the data section).
  fs::copy(tmp.File("a"), tmp.File("byte"));
  std::string raw = ReadBytes(tmp.File("byte") + "/adapter_model.safetensors");
  raw.back() = static_cast<char>(raw.back() ^ 0x01);
  WriteBytes(tmp.File("byte") + "/adapter_model.safetensors", raw);
  EXPECT_NE(hash(tmp.File("byte")), h);

  // Same tensors, another adapter_config.json (an ignored field, same scale).
  Draft other = fixture;
  other.config["lora_dropout"] = 0.1;
  WriteDraft(other, tmp.File("config"));
  EXPECT_EQ(ReadBytes(tmp.File("config") + "/adapter_model.safetensors"),
            ReadBytes(tmp.File("a") + "/adapter_model.safetensors"));
  EXPECT_NE(hash(tmp.File("config")), h);
}

}  // namespace
}  // namespace loom
