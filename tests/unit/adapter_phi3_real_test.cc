// LoadAdapter with the real Phi-3.5-mini adapter config against shape-only bases of the real Phi-3
// config.
#include "unit/adapter_test_util.h"

namespace loom {
namespace {

const std::string kPhi3Config =
    kShared + "model_configs/Phi-3-mini-4k-instruct-unsloth-merged/config.json";
const std::string kPhi35Adapter = kRealConfigs + "kashewknutt-personality-bot__1.json";

// Writes DIR/model.safetensors (or adapter_model.safetensors): a BF16 header for `tensors` and a
// data section that is a hole, so a 3.8B base or a rank-32 adapter costs a few KiB of disk.
void WriteShapeOnly(const std::string& path,
                    const std::vector<std::pair<std::string, std::vector<int64_t>>>& tensors) {
  nlohmann::json header = nlohmann::json::object();
  uint64_t offset = 0;
  for (const auto& [name, shape] : tensors) {
    uint64_t n = 2;
    for (int64_t d : shape) n *= static_cast<uint64_t>(d);
    header[name] = {{"dtype", "BF16"}, {"shape", shape}, {"data_offsets", {offset, offset + n}}};
    offset += n;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::string prefix(8, '\0');
  for (int i = 0; i < 8; ++i)
    prefix[static_cast<size_t>(i)] = static_cast<char>((text.size() >> (8 * i)) & 0xff);
  WriteBytes(path, prefix + text);
  fs::resize_file(path, 8 + text.size() + offset);
}

// The real Phi-3-mini config as `architecture` (the unsloth checkpoint is saved as Mistral with
// split projections; Phi3ForCausalLM has the fused ones), as a loadable shape-only base.
std::unique_ptr<Model> PhiBase(const TempDir& tmp, const std::string& architecture) {
  auto text = ReadTextFile(kPhi3Config);
  EXPECT_TRUE(text.ok());
  nlohmann::json j = nlohmann::json::parse(*text);
  j["architectures"] = {architecture};
  const std::string dir = tmp.File(architecture);
  fs::create_directories(dir);
  WriteBytes(dir + "/config.json", j.dump());
  auto config = ParseModelConfig(j.dump(), "", dir);
  EXPECT_TRUE(config.ok()) << config.status().ToString();
  ModelWeights w;
  std::vector<std::pair<std::string, std::vector<int64_t>>> tensors;
  for (const WeightSlot& slot : EnumerateWeights(*config, &w)) {
    if (slot.required) tensors.emplace_back(slot.name, slot.shape);
  }
  WriteShapeOnly(dir + "/model.safetensors", tensors);
  auto model = Model::Load(dir, LoadOptions{.check_weights = false});
  EXPECT_TRUE(model.ok()) << model.status().ToString();
  return model.ok() ? std::move(*model) : nullptr;
}

// An adapter folder: the real config (target_modules replaced when `targets` is non-empty) and
// LoRA A/B of rank r for every layer's targeted module, with `out` rows per module.
void WriteAdapter(const std::string& dir, const std::vector<std::string>& targets,
                  const std::map<std::string, int64_t>& out, int layers, int64_t hidden, int r) {
  auto text = ReadTextFile(kPhi35Adapter);
  ASSERT_TRUE(text.ok());
  ojson config = ojson::parse(*text);
  if (!targets.empty()) config["target_modules"] = targets;
  fs::create_directories(dir);
  WriteBytes(dir + "/adapter_config.json", config.dump(2));
  std::vector<std::pair<std::string, std::vector<int64_t>>> tensors;
  for (int layer = 0; layer < layers; ++layer) {
    for (const auto& m : config["target_modules"]) {
      const std::string name = m.get<std::string>();
      const bool attn = name[0] == 'q' || name[0] == 'k' || name[0] == 'v' || name[0] == 'o';
      const std::string p = "base_model.model.model.layers." + std::to_string(layer) +
                            (attn ? ".self_attn." : ".mlp.") + name;
      const int64_t in = name == "down_proj" ? out.at("ffn")
                         : name == "o_proj"  ? out.at("q")
                                             : hidden;
      tensors.push_back({p + ".lora_A.weight", {r, in}});
      tensors.push_back({p + ".lora_B.weight", {out.at(name), r}});
    }
  }
  WriteShapeOnly(dir + "/adapter_model.safetensors", tensors);
}

// kashewknutt/personality-bot: r 32, alpha 16 on q/k/v/o/gate/up/down of
// unsloth/phi-3.5-mini-instruct-bnb-4bit, a Phi-3 saved with split projections.
TEST(Phi3RealAdapterTest, RealConfigOnTheSplitLayoutAttachesEveryTensor) {
  TempDir tmp;
  auto model = PhiBase(tmp, "MistralForCausalLM");
  ASSERT_NE(model, nullptr);
  const std::map<std::string, int64_t> out = {
      {"q_proj", 3072},    {"k_proj", 3072},    {"v_proj", 3072},
      {"o_proj", 3072},    {"gate_proj", 8192}, {"up_proj", 8192},
      {"down_proj", 3072}, {"q", 3072},         {"ffn", 8192}};
  WriteAdapter(tmp.File("a"), {}, out, 32, 3072, 32);
  auto a = Load(tmp.File("a"), *model, 0, "personality");
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ((*a)->modules().size(), 32u * 7);
  EXPECT_EQ((*a)->max_rank(), 32);
  for (const LoraWeights* lw : (*a)->modules()) {
    EXPECT_EQ(lw->rank, 32) << lw->module_path;
    EXPECT_FLOAT_EQ(lw->scale, 0.5f) << lw->module_path;  // alpha 16 / r 32
  }
  auto store = SafetensorsStore::Open(tmp.File("a") + "/adapter_model.safetensors");
  ASSERT_TRUE(store.ok());
  EXPECT_EQ((*a)->tensor_bytes(), (*store)->total_bytes());
}

// The same fine-tune's config on the fused layout Phi3ForCausalLM loads (PEFT would attach only
// o_proj and down_proj and drop the rest silently): refused, naming a tensor it cannot place.
TEST(Phi3RealAdapterTest, SplitLayoutAdapterOnTheFusedLayoutNamesTheTensor) {
  TempDir tmp;
  auto model = PhiBase(tmp, "Phi3ForCausalLM");
  ASSERT_NE(model, nullptr);
  const std::map<std::string, int64_t> out = {
      {"q_proj", 3072},    {"k_proj", 3072},    {"v_proj", 3072},
      {"o_proj", 3072},    {"gate_proj", 8192}, {"up_proj", 8192},
      {"down_proj", 3072}, {"q", 3072},         {"ffn", 8192}};
  WriteAdapter(tmp.File("a"), {}, out, 32, 3072, 32);
  auto a = Load(tmp.File("a"), *model, 0, "personality");
  ASSERT_FALSE(a.ok());
  EXPECT_TRUE(Contains(a.status().message(), "which Phi3ForCausalLM does not have"));
  EXPECT_TRUE(Contains(a.status().message(), "adapter 'personality'"));
}

// Its r and alpha on the fused modules, as a LoRA of the real Phi3ForCausalLM layout has them:
// qkv_proj B [3·3072, 32], gate_up_proj B [2·8192, 32]; every tensor attached.
TEST(Phi3RealAdapterTest, RealConfigOnTheFusedModulesAttachesEveryTensor) {
  TempDir tmp;
  auto model = PhiBase(tmp, "Phi3ForCausalLM");
  ASSERT_NE(model, nullptr);
  const std::map<std::string, int64_t> out = {
      {"qkv_proj", 9216},  {"o_proj", 3072}, {"gate_up_proj", 16384},
      {"down_proj", 3072}, {"q", 3072},      {"ffn", 8192}};
  WriteAdapter(tmp.File("a"), {"qkv_proj", "o_proj", "gate_up_proj", "down_proj"}, out, 32, 3072,
               32);
  auto a = Load(tmp.File("a"), *model, 0, "personality");
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ((*a)->modules().size(), 32u * 4);
  for (const LoraWeights* lw : (*a)->modules()) {
    EXPECT_EQ(lw->rank, 32) << lw->module_path;
    EXPECT_FLOAT_EQ(lw->scale, 0.5f) << lw->module_path;
    const std::string leaf = lw->module_path.substr(lw->module_path.rfind('.') + 1);
    EXPECT_EQ(lw->b.shape, (std::vector<int64_t>{out.at(leaf), 32})) << lw->module_path;
  }
  auto store = SafetensorsStore::Open(tmp.File("a") + "/adapter_model.safetensors");
  ASSERT_TRUE(store.ok());
  EXPECT_EQ((*store)->names().size(), 32u * 4 * 2);
  EXPECT_EQ((*a)->tensor_bytes(), (*store)->total_bytes());
}

}  // namespace
}  // namespace loom
