// Tests of Model::Load and the weight table: fixtures load, bad checkpoints fail naming the tensor.
#include "model/weights.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "io/safetensors.h"
#include "model/model.h"
#include "tensor/dtype.h"

namespace loom {
namespace {

namespace fs = std::filesystem;

const std::string kModels = std::string(LOOM_FIXTURES) + "/models";

::testing::AssertionResult Contains(const std::string& text, const std::string& part) {
  if (text.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "'" << part << "' not in: " << text;
}

std::vector<std::string> FixtureNames() {
  return {"llama_f32", "llama_bf16", "mistral_f32", "mistral_bf16",
          "qwen2_f32", "qwen2_bf16", "qwen3_f32",   "qwen3_bf16"};
}

// ---------------------------------------------------------------------------------------
// Every fixture model loads, with its weights where the config says.

bool AllFiniteAndSomeNonZero(const std::vector<float>& v) {
  bool nonzero = false;
  for (float x : v) {
    if (!std::isfinite(x)) return false;
    nonzero |= x != 0.0f;
  }
  return nonzero;
}

class FixtureLoadTest : public ::testing::TestWithParam<std::string> {};

TEST_P(FixtureLoadTest, LoadsAndFillsEveryWeight) {
  const std::string dir = kModels + "/" + GetParam();
  auto m = Model::Load(dir);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  const ModelConfig& c = (*m)->config();
  const ModelWeights& w = (*m)->weights();
  const DType file_dtype = GetParam().ends_with("_f32") ? DType::kF32 : DType::kBF16;
  EXPECT_EQ((*m)->dir(), dir);
  EXPECT_GT((*m)->weight_bytes(), 0u);

  EXPECT_EQ(w.embed.dtype, file_dtype);
  EXPECT_EQ(w.embed.shape, (std::vector<int64_t>{c.vocab_size, c.model_dim}));
  EXPECT_NE(w.embed.data, nullptr);
  ASSERT_EQ(w.layers.size(), static_cast<size_t>(c.num_layers));
  const int64_t q_dim = int64_t{c.num_heads} * c.head_dim;
  const int64_t kv_dim = int64_t{c.num_kv_heads} * c.head_dim;
  for (size_t i = 0; i < w.layers.size(); ++i) {
    SCOPED_TRACE("layer " + std::to_string(i));
    const LayerWeights& l = w.layers[i];
    EXPECT_EQ(l.q_proj.weight.shape, (std::vector<int64_t>{q_dim, c.model_dim}));
    EXPECT_EQ(l.k_proj.weight.shape, (std::vector<int64_t>{kv_dim, c.model_dim}));
    EXPECT_EQ(l.v_proj.weight.shape, (std::vector<int64_t>{kv_dim, c.model_dim}));
    EXPECT_EQ(l.o_proj.weight.shape, (std::vector<int64_t>{c.model_dim, q_dim}));
    EXPECT_EQ(l.gate_proj.weight.shape, (std::vector<int64_t>{c.ffn_dim, c.model_dim}));
    EXPECT_EQ(l.down_proj.weight.shape, (std::vector<int64_t>{c.model_dim, c.ffn_dim}));
    EXPECT_EQ(l.up_proj.weight.dtype, file_dtype);
    EXPECT_EQ(l.q_proj.name, "model.layers." + std::to_string(i) + ".self_attn.q_proj");
    ASSERT_EQ(l.input_norm.size(), static_cast<size_t>(c.model_dim));
    ASSERT_EQ(l.post_norm.size(), static_cast<size_t>(c.model_dim));
    EXPECT_TRUE(AllFiniteAndSomeNonZero(l.input_norm));
    EXPECT_TRUE(AllFiniteAndSomeNonZero(l.post_norm));
    if (c.qkv_bias) {
      ASSERT_EQ(l.q_proj.bias.size(), static_cast<size_t>(q_dim));
      ASSERT_EQ(l.k_proj.bias.size(), static_cast<size_t>(kv_dim));
      EXPECT_TRUE(AllFiniteAndSomeNonZero(l.q_proj.bias));
      EXPECT_TRUE(AllFiniteAndSomeNonZero(l.v_proj.bias));
    } else {
      EXPECT_TRUE(l.q_proj.bias.empty());
    }
    EXPECT_TRUE(l.o_proj.bias.empty());
    if (c.qk_norm) {
      ASSERT_EQ(l.q_norm.size(), static_cast<size_t>(c.head_dim));
      ASSERT_EQ(l.k_norm.size(), static_cast<size_t>(c.head_dim));
      EXPECT_TRUE(AllFiniteAndSomeNonZero(l.q_norm));
      EXPECT_TRUE(AllFiniteAndSomeNonZero(l.k_norm));
    } else {
      EXPECT_TRUE(l.q_norm.empty());
    }
  }
  EXPECT_TRUE(AllFiniteAndSomeNonZero(w.final_norm));
  EXPECT_EQ(w.lm_head.weight.shape, (std::vector<int64_t>{c.vocab_size, c.model_dim}));
  if (c.tie_word_embeddings) {
    EXPECT_EQ(w.lm_head.weight.data, w.embed.data);
  } else {
    EXPECT_NE(w.lm_head.weight.data, w.embed.data);
    EXPECT_NE(w.lm_head.weight.data, nullptr);
  }
}

INSTANTIATE_TEST_SUITE_P(Models, FixtureLoadTest, ::testing::ValuesIn(FixtureNames()));

// ---------------------------------------------------------------------------------------
// Modified copies of a fixture: the same config with a rewritten model.safetensors.

// One tensor of a rewritten checkpoint; `dtype_name` may be any safetensors dtype.
struct RawTensor {
  std::string name;
  std::string dtype_name;
  std::vector<int64_t> shape;
  std::string bytes;
};

size_t ElementSize(const std::string& dtype_name) {
  if (dtype_name == "F32" || dtype_name == "I32") return 4;
  if (dtype_name == "F16" || dtype_name == "BF16") return 2;
  ADD_FAILURE() << "no size for " << dtype_name;
  return 1;
}

std::string RandomBytesOfFloats(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(0.1f, 1.0f);
  std::string s(static_cast<size_t>(n) * 4, '\0');
  for (int64_t i = 0; i < n; ++i) {
    float x = rng() % 2 ? dist(rng) : -dist(rng);
    std::memcpy(&s[static_cast<size_t>(i) * 4], &x, 4);
  }
  return s;
}

// Writes the tensors as one safetensors file: F32/F16/BF16 through WriteSafetensors (the
// writer under test elsewhere), other dtypes with a hand-built header.
void WriteCheckpoint(const std::string& path, const std::vector<RawTensor>& tensors) {
  bool computable = true;
  for (const auto& t : tensors) {
    computable &= t.dtype_name == "F32" || t.dtype_name == "F16" || t.dtype_name == "BF16";
  }
  if (computable) {
    std::vector<TensorToWrite> out;
    for (const auto& t : tensors) {
      DType d = t.dtype_name == "F32"   ? DType::kF32
                : t.dtype_name == "F16" ? DType::kF16
                                        : DType::kBF16;
      out.push_back({t.name, d, t.shape, t.bytes.data()});
    }
    ASSERT_TRUE(WriteSafetensors(path, out, {{"format", "pt"}}).ok()) << path;
    return;
  }
  nlohmann::json header = nlohmann::json::object();
  std::string data;
  for (const auto& t : tensors) {
    header[t.name] = {{"dtype", t.dtype_name},
                      {"shape", t.shape},
                      {"data_offsets", {data.size(), data.size() + t.bytes.size()}}};
    data += t.bytes;
  }
  std::string h = header.dump();
  while (h.size() % 8 != 0) h.push_back(' ');
  std::string image(8, '\0');
  for (int i = 0; i < 8; ++i)
    image[static_cast<size_t>(i)] = static_cast<char>((h.size() >> (8 * i)) & 0xff);
  image += h + data;
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(image.data(), static_cast<std::streamsize>(image.size()));
  ASSERT_TRUE(out.good()) << path;
}

// A temp folder holding a copy of a fixture model's config and a rewritten checkpoint.
class ModifiedModelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "loom_weights_XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  // The tensors of fixture `model` (all shards), in name order.
  std::vector<RawTensor> ReadFixture(const std::string& model) {
    auto store = SafetensorsStore::Open(kModels + "/" + model);
    EXPECT_TRUE(store.ok()) << store.status().ToString();
    std::vector<RawTensor> out;
    if (!store.ok()) return out;
    for (const auto& name : (*store)->names()) {
      const TensorInfo* info = (*store)->Find(name);
      out.push_back({name, info->dtype_name, info->shape,
                     std::string(reinterpret_cast<const char*>(info->data), info->nbytes)});
    }
    return out;
  }

  // Copies `model`'s config files next to a model.safetensors holding `tensors`.
  void WriteModel(const std::string& model, const std::vector<RawTensor>& tensors) {
    for (const char* f : {"config.json", "generation_config.json"}) {
      fs::copy_file(fs::path(kModels) / model / f, fs::path(dir_) / f,
                    fs::copy_options::overwrite_existing);
    }
    WriteCheckpoint(checkpoint(), tensors);
  }

  std::string checkpoint() const { return (fs::path(dir_) / "model.safetensors").string(); }

  static RawTensor* FindTensor(std::vector<RawTensor>& ts, const std::string& name) {
    for (auto& t : ts) {
      if (t.name == name) return &t;
    }
    ADD_FAILURE() << "fixture has no tensor " << name;
    return nullptr;
  }

  std::string dir_;
};

TEST_F(ModifiedModelTest, UnmodifiedRewriteLoads) {
  // The rewrite itself is faithful (a sharded fixture becomes one file).
  for (const std::string model : {"llama_bf16", "mistral_f32"}) {
    SCOPED_TRACE(model);
    WriteModel(model, ReadFixture(model));
    auto m = Model::Load(dir_);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    auto orig = Model::Load(kModels + "/" + model);
    ASSERT_TRUE(orig.ok());
    EXPECT_EQ((*m)->weights().layers[1].post_norm, (*orig)->weights().layers[1].post_norm);
    EXPECT_EQ(std::memcmp((*m)->weights().embed.data, (*orig)->weights().embed.data,
                          (*orig)->weights().embed.nbytes()),
              0);
  }
}

TEST_F(ModifiedModelTest, MissingRequiredTensor) {
  struct Case {
    std::string model;
    std::string name;
    std::string shape;
    std::string arch;
  };
  for (const Case& c : std::vector<Case>{
           {"llama_f32", "model.layers.1.self_attn.k_proj.weight", "[32, 64]", "LlamaForCausalLM"},
           {"llama_bf16", "lm_head.weight", "[256, 64]", "LlamaForCausalLM"},
           {"qwen2_f32", "model.layers.2.self_attn.v_proj.bias", "[32]", "Qwen2ForCausalLM"},
           {"qwen3_bf16", "model.layers.0.self_attn.q_norm.weight", "[32]", "Qwen3ForCausalLM"},
           {"mistral_bf16", "model.norm.weight", "[64]", "MistralForCausalLM"}}) {
    SCOPED_TRACE(c.model + " without " + c.name);
    std::vector<RawTensor> ts = ReadFixture(c.model);
    const size_t before = ts.size();
    std::erase_if(ts, [&](const RawTensor& t) { return t.name == c.name; });
    ASSERT_EQ(ts.size(), before - 1);
    WriteModel(c.model, ts);
    auto m = Model::Load(dir_);
    ASSERT_FALSE(m.ok());
    const std::string msg = m.status().message();
    EXPECT_TRUE(Contains(msg, "missing tensor '" + c.name + "'"));
    EXPECT_TRUE(Contains(msg, "with shape " + c.shape));
    EXPECT_TRUE(Contains(msg, c.arch));
    EXPECT_TRUE(Contains(msg, checkpoint()));
  }
}

TEST_F(ModifiedModelTest, WrongShape) {
  std::vector<RawTensor> ts = ReadFixture("llama_f32");
  RawTensor* t = FindTensor(ts, "model.layers.0.mlp.up_proj.weight");
  ASSERT_NE(t, nullptr);
  ASSERT_EQ(t->shape, (std::vector<int64_t>{128, 64}));
  t->shape = {128, 32};
  t->bytes = RandomBytesOfFloats(128 * 32, 5);
  WriteModel("llama_f32", ts);
  auto m = Model::Load(dir_);
  ASSERT_FALSE(m.ok());
  const std::string msg = m.status().message();
  EXPECT_TRUE(Contains(msg, "'model.layers.0.mlp.up_proj.weight'"));
  EXPECT_TRUE(Contains(msg, "[128, 32]"));
  EXPECT_TRUE(Contains(msg, "[128, 64]"));
  EXPECT_TRUE(Contains(msg, checkpoint()));

  // Transposed: same element count, other shape.
  ts = ReadFixture("qwen3_f32");
  t = FindTensor(ts, "model.layers.2.self_attn.o_proj.weight");
  ASSERT_NE(t, nullptr);
  ASSERT_EQ(t->shape, (std::vector<int64_t>{64, 128}));
  t->shape = {128, 64};
  WriteModel("qwen3_f32", ts);
  auto q = Model::Load(dir_);
  ASSERT_FALSE(q.ok());
  EXPECT_TRUE(Contains(q.status().message(),
                       "'model.layers.2.self_attn.o_proj.weight' has shape "
                       "[128, 64], the config needs [64, 128]"));
}

TEST_F(ModifiedModelTest, UnknownExtraTensor) {
  std::vector<RawTensor> ts = ReadFixture("mistral_f32");
  ts.push_back({"model.layers.0.self_attn.extra_gate.weight",
                "F32",
                {4, 64},
                RandomBytesOfFloats(4 * 64, 6)});
  WriteModel("mistral_f32", ts);
  auto m = Model::Load(dir_);
  ASSERT_FALSE(m.ok());
  const std::string msg = m.status().message();
  EXPECT_TRUE(Contains(msg, "model.layers.0.self_attn.extra_gate.weight"));
  EXPECT_TRUE(Contains(msg, "not used by MistralForCausalLM"));
  EXPECT_TRUE(Contains(msg, checkpoint()));

  // A bias the config does not ask for (Llama without attention_bias) is a leftover too.
  ts = ReadFixture("llama_bf16");
  ts.push_back({"model.layers.1.self_attn.q_proj.bias", "BF16", {64}, std::string(128, '\x3c')});
  WriteModel("llama_bf16", ts);
  auto b = Model::Load(dir_);
  ASSERT_FALSE(b.ok());
  EXPECT_TRUE(Contains(b.status().message(), "model.layers.1.self_attn.q_proj.bias"));
  EXPECT_TRUE(Contains(b.status().message(), "not used"));
}

TEST_F(ModifiedModelTest, RotaryInvFreqBufferIsAccepted) {
  std::vector<RawTensor> ts = ReadFixture("llama_f32");
  for (int i = 0; i < 3; ++i) {
    ts.push_back({"model.layers." + std::to_string(i) + ".self_attn.rotary_emb.inv_freq",
                  "F32",
                  {8},
                  RandomBytesOfFloats(8, 7 + static_cast<uint32_t>(i))});
  }
  ts.push_back({"model.rotary_emb.inv_freq", "F32", {8}, RandomBytesOfFloats(8, 11)});
  WriteModel("llama_f32", ts);
  auto m = Model::Load(dir_);
  ASSERT_TRUE(m.ok()) << m.status().ToString();

  // Only that exact suffix is skipped.
  ts.push_back({"model.rotary_emb.inv_freq_extra", "F32", {8}, RandomBytesOfFloats(8, 12)});
  WriteModel("llama_f32", ts);
  auto bad = Model::Load(dir_);
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(Contains(bad.status().message(), "model.rotary_emb.inv_freq_extra"));
}

TEST_F(ModifiedModelTest, TiedQwen2AcceptsAStoredLmHead) {
  std::vector<RawTensor> ts = ReadFixture("qwen2_bf16");
  for (const auto& t : ts) ASSERT_NE(t.name, "lm_head.weight");
  const RawTensor* embed = FindTensor(ts, "model.embed_tokens.weight");
  ASSERT_NE(embed, nullptr);
  RawTensor head = *embed;
  head.name = "lm_head.weight";
  ts.push_back(head);
  WriteModel("qwen2_bf16", ts);
  auto m = Model::Load(dir_);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  ASSERT_TRUE((*m)->config().tie_word_embeddings);
  // Like transformers, the tied head is the embedding.
  EXPECT_EQ((*m)->weights().lm_head.weight.data, (*m)->weights().embed.data);
}

TEST_F(ModifiedModelTest, WeightStoredAsI32) {
  std::vector<RawTensor> ts = ReadFixture("qwen2_f32");
  RawTensor* t = FindTensor(ts, "model.layers.1.mlp.gate_proj.weight");
  ASSERT_NE(t, nullptr);
  t->dtype_name = "I32";  // same byte count as F32
  ASSERT_EQ(t->bytes.size(), 128u * 64 * ElementSize("I32"));
  WriteModel("qwen2_f32", ts);
  auto m = Model::Load(dir_);
  ASSERT_FALSE(m.ok());
  const std::string msg = m.status().message();
  EXPECT_TRUE(Contains(msg, "'model.layers.1.mlp.gate_proj.weight'"));
  EXPECT_TRUE(Contains(msg, "dtype I32"));
  EXPECT_TRUE(Contains(msg, checkpoint()));
  // A norm (converted to f32 at load) stored as I32 fails the same way.
  ts = ReadFixture("qwen2_f32");
  t = FindTensor(ts, "model.norm.weight");
  ASSERT_NE(t, nullptr);
  t->dtype_name = "I32";
  WriteModel("qwen2_f32", ts);
  auto n = Model::Load(dir_);
  ASSERT_FALSE(n.ok());
  EXPECT_TRUE(Contains(n.status().message(), "'model.norm.weight' has dtype I32"));
}

TEST_F(ModifiedModelTest, MixedFileDtypesLoad) {
  // A checkpoint may mix F16, BF16 and F32 tensors; norms become f32 whatever they are stored in.
  std::vector<RawTensor> ts = ReadFixture("llama_f32");
  RawTensor* norm = FindTensor(ts, "model.layers.0.input_layernorm.weight");
  ASSERT_NE(norm, nullptr);
  std::vector<float> want(64);
  std::memcpy(want.data(), norm->bytes.data(), 256);
  std::string f16(128, '\0');
  for (size_t i = 0; i < 64; ++i) {
    uint16_t h = F32ToF16(want[i]);
    std::memcpy(&f16[i * 2], &h, 2);
  }
  norm->dtype_name = "F16";
  norm->bytes = f16;
  WriteModel("llama_f32", ts);
  auto m = Model::Load(dir_);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  const auto& got = (*m)->weights().layers[0].input_norm;
  ASSERT_EQ(got.size(), 64u);
  for (size_t i = 0; i < 64; ++i) EXPECT_NEAR(got[i], want[i], 1e-3f * std::fabs(want[i])) << i;
}

TEST(ModelLoadTest, MissingConfigOrCheckpointNamesIt) {
  std::string tmpl = (fs::temp_directory_path() / "loom_weights_XXXXXX").string();
  ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
  const std::string dir = tmpl;
  auto no_config = Model::Load(dir);
  ASSERT_FALSE(no_config.ok());
  EXPECT_TRUE(Contains(no_config.status().message(), dir + "/config.json"));

  fs::copy_file(kModels + "/qwen3_f32/config.json", dir + "/config.json");
  auto no_weights = Model::Load(dir);
  ASSERT_FALSE(no_weights.ok());
  EXPECT_EQ(no_weights.status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(Contains(no_weights.status().message(), dir));
  EXPECT_TRUE(Contains(no_weights.status().message(), "model.safetensors"));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace loom
