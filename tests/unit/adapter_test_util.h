// Shared helpers for the adapter loading tests: temp dirs, in-memory adapter drafts, fixture models.
#pragma once
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

[[maybe_unused]] ::testing::AssertionResult Contains(const std::string& text, const std::string& part) {
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

[[maybe_unused]] void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << "cannot write " << path;
}

// Writes DIR/config.json and DIR/model.safetensors: a BF16 header for every weight of the
// config and a data section that is a hole (the file is extended, not written), so a 1B model
// costs a few KiB of disk and Model::Load maps zeros. LoadAdapter only needs the shapes.
[[maybe_unused]] void WriteShapeOnlyBase(const std::string& dir, const std::string& config_json) {
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

[[maybe_unused]] std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

[[maybe_unused]] float MaxAbsDiff(const std::vector<float>& a, const std::vector<float>& b) {
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

[[maybe_unused]] Draft ReadDraft(const std::string& dir) {
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

[[maybe_unused]] void WriteDraft(const Draft& d, const std::string& dir) {
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
[[maybe_unused]] std::string Key(int layer, const std::string& module, const std::string& part) {
  const bool attn =
      module == "q_proj" || module == "k_proj" || module == "v_proj" || module == "o_proj";
  return "base_model.model.model.layers." + std::to_string(layer) +
         (attn ? ".self_attn." : ".mlp.") + module + "." + part;
}

// The tiny fixture base models, loaded once.
[[maybe_unused]] Model& FixtureModel(const std::string& name) {
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
  return LoadAdapter(name, dir, model.sites(), max_rank);
}

// Prompt logits [prompt_len * vocab] of `model` with `adapter` (null = base) applied unmerged.
[[maybe_unused]] std::vector<float> PromptLogits(Model* model, std::shared_ptr<const Adapter> adapter,
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

}  // namespace
}  // namespace loom
