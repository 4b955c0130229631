// Adversarial checkpoints and adapters crafted from the fixtures: non-finite weights, tensors
// stored misaligned, config values outside their caps or domains, string-typed numbers. Each is
// refused with the error class and a message naming the tensor or field and the file (or, for
// misalignment, loaded correctly); nothing on disk changes.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>

#include "adversarial_util.h"
#include "base/json.h"
#include "base/mmap_file.h"
#include "checkpoint_edit_util.h"
#include "io/safetensors.h"
#include "lora/adapter.h"
#include "model/kv_cache.h"
#include "model/model.h"
#include "tensor/finite.h"

namespace loom {
namespace {

using namespace loom::testing;
using json = nlohmann::json;

// Writes `value` (as the tensor's dtype) over element `index` of tensor `name` in `file`.
void PoisonTensor(const std::string& file, const std::string& name, int64_t index, float value) {
  std::string bytes = ReadBytes(file);
  auto infos = ParseSafetensors(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), file,
                                nullptr);
  ASSERT_TRUE(infos.ok()) << infos.status().ToString();
  for (const TensorInfo& info : *infos) {
    if (info.name != name) continue;
    const size_t offset = static_cast<size_t>(info.data - reinterpret_cast<const uint8_t*>(bytes.data()));
    const size_t elem = DTypeSize(*info.dtype);
    uint8_t encoded[4];
    ConvertFromF32(*info.dtype, &value, encoded, 1);
    std::memcpy(bytes.data() + offset + static_cast<size_t>(index) * elem, encoded, elem);
    WriteBytes(file, bytes);
    return;
  }
  FAIL() << name << " not in " << file;
}

// Review finding: with --no-check-weights a NaN weight made every sequence end at its first
// step, and `loom bench` still printed figures (50,000,000 tok/s) and exited 0.
TEST(AdversarialWeights, BenchFailsWhenItsSequencesFail) {
  TempDir dir;
  const std::string model = dir.Path("m");
  CopyDir(kFixtures + "/models/llama_f32", model);
  PoisonTensor(model + "/model.safetensors", "model.layers.1.mlp.up_proj.weight", 37,
               std::nanf(""));
  const RunResult r = RunLoom("bench --model " + model +
                              " --no-check-weights --prompt-len 8 --gen-tokens 4 --batch 1");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_TRUE(Contains(r.output, "error: bench:")) << r.output;
  EXPECT_TRUE(Contains(r.output, "NaN")) << r.output;
  EXPECT_FALSE(Contains(r.output, "decode tok/s\n1 ")) << r.output;
}

// Review findings: a tensor missing from a sharded checkpoint's index was reported against
// the first shard (which never listed it); an empty --model read the root's config.json.
TEST(AdversarialWeights, AMissingTensorNamesTheIndexAndAnEmptyPathIsRefused) {
  TempDir dir;
  const std::string model = dir.Path("m");
  CopyDir(kFixtures + "/models/mistral_f32", model);
  const std::string index = model + "/model.safetensors.index.json";
  auto j = nlohmann::json::parse(ReadBytes(index));
  ASSERT_EQ(j["weight_map"].erase("lm_head.weight"), 1u);
  WriteBytes(index, j.dump());
  const std::string shard = model + "/model-00002-of-00002.safetensors";
  testutil::RawFile raw = testutil::ReadRaw(shard);
  ASSERT_EQ(raw.erase("lm_head.weight"), 1u);
  testutil::WriteRaw(shard, raw);
  auto m = Model::Load(model);
  EXPECT_STATUS(m.status(), StatusCode::kInvalidArgument,
                "checkpoint " + index + ": missing tensor 'lm_head.weight'");
  EXPECT_STATUS(Model::Load("").status(), StatusCode::kInvalidArgument,
                "the model folder path is empty");
}

TEST(AdversarialWeights, NonFiniteModelWeightIsRefusedNamingTensorAndIndex) {
  for (const std::string fixture : {"llama_f32", "llama_bf16", "qwen2_bf16"}) {
    for (float bad : {std::nanf(""), INFINITY, -INFINITY}) {
      SCOPED_TRACE(fixture);
      TempDir dir;
      const std::string model = dir.Path("m");
      CopyDir(kFixtures + "/models/" + fixture, model);
      PoisonTensor(model + "/model.safetensors", "model.layers.1.mlp.up_proj.weight", 37, bad);
      const auto before = Snapshot(dir.path());
      auto m = Model::Load(model);
      EXPECT_STATUS(m.status(), StatusCode::kInvalidArgument,
                    "tensor 'model.layers.1.mlp.up_proj.weight'", "at index 37",
                    std::isnan(bad) ? "NaN" : (bad > 0 ? "+Inf" : "-Inf"), "--no-check-weights");
      LoadOptions unchecked;
      unchecked.check_weights = false;
      EXPECT_TRUE(Model::Load(model, unchecked).ok());  // the flag's documented escape hatch
      EXPECT_EQ(Snapshot(dir.path()), before);
    }
  }
}

TEST(AdversarialWeights, NonFiniteAdapterWeightIsRefusedNamingTheAdapterAndTensor) {
  auto model = Model::Load(kFixtures + "/models/llama_f32");
  ASSERT_TRUE(model.ok());
  TempDir dir;
  const std::string ad = dir.Path("a");
  CopyDir(kFixtures + "/adapters/llama_qv_r8_f32", ad);
  const std::string file = ad + "/adapter_model.safetensors";
  std::string first_b;
  {
    auto store = SafetensorsStore::Open(file);
    ASSERT_TRUE(store.ok());
    for (const auto& n : (*store)->names()) {
      if (Contains(n, "lora_B")) first_b = n;
    }
  }
  PoisonTensor(file, first_b, 3, std::nanf(""));
  const auto before = Snapshot(dir.path());
  auto a = LoadAdapter("sql", ad, (*model)->sites(), 0);
  EXPECT_STATUS(a.status(), StatusCode::kInvalidArgument, "adapter 'sql'", first_b, "NaN at index 3");
  EXPECT_TRUE(LoadAdapter("sql", ad, (*model)->sites(), 0, false).ok());
  EXPECT_EQ(Snapshot(dir.path()), before);
}

TEST(AdversarialWeights, FindNonFiniteFindsTheFirstBadValueAtAnyOffset) {
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (int64_t n : {1, 7, 2048, 5000}) {
      std::vector<float> v(static_cast<size_t>(n), 0.25f);
      const size_t bytes = static_cast<size_t>(n) * DTypeSize(dtype);
      std::vector<float> aligned(static_cast<size_t>(n));  // room for any dtype's encoding
      ConvertFromF32(dtype, v.data(), aligned.data(), n);
      std::vector<uint8_t> raw(bytes + 1);
      std::memcpy(raw.data() + 1, aligned.data(), bytes);  // misaligned on purpose
      EXPECT_EQ(FindNonFinite(dtype, raw.data() + 1, n), -1);
      const float inf = INFINITY;
      uint32_t enc = 0;
      ConvertFromF32(dtype, &inf, &enc, 1);
      std::memcpy(raw.data() + 1 + bytes - DTypeSize(dtype), &enc, DTypeSize(dtype));
      EXPECT_EQ(FindNonFinite(dtype, raw.data() + 1, n), n - 1);
    }
  }
  // The largest finite values are finite.
  const float big = 3.0e38f;
  EXPECT_EQ(FindNonFinite(DType::kF32, &big, 1), -1);
  const uint16_t f16_max = 0x7BFF, bf16_max = 0x7F7F;
  EXPECT_EQ(FindNonFinite(DType::kF16, &f16_max, 1), -1);
  EXPECT_EQ(FindNonFinite(DType::kBF16, &bf16_max, 1), -1);
}

// A header padded with one extra byte shifts every tensor to an odd address: loom copies such
// tensors to aligned memory (UBSan: no misaligned loads) and computes the same values.
TEST(AdversarialWeights, MisalignedTensorDataLoadsAlignedWithTheSameValues) {
  TempDir dir;
  const std::string model = dir.Path("m");
  CopyDir(kFixtures + "/models/llama_f32", model);
  const std::string file = model + "/model.safetensors";
  std::string bytes = ReadBytes(file);
  uint64_t len = 0;
  for (int i = 7; i >= 0; --i) len = (len << 8) | static_cast<uint8_t>(bytes[static_cast<size_t>(i)]);
  bytes.insert(8 + len, " ");
  ++len;
  for (int i = 0; i < 8; ++i) bytes[static_cast<size_t>(i)] = static_cast<char>((len >> (8 * i)) & 0xff);
  WriteBytes(file, bytes);
  auto shifted = SafetensorsStore::Open(file);
  auto original = SafetensorsStore::Open(kFixtures + "/models/llama_f32/model.safetensors");
  ASSERT_TRUE(shifted.ok()) << shifted.status().ToString();
  ASSERT_TRUE(original.ok());
  for (const auto& name : (*original)->names()) {
    auto a = (*original)->Get(name);
    auto b = (*shifted)->Get(name);
    ASSERT_TRUE(b.ok());
    EXPECT_EQ(reinterpret_cast<uintptr_t>(b->data) % DTypeSize(b->dtype), 0u) << name;
    EXPECT_EQ(std::memcmp(a->data, b->data, a->nbytes()), 0) << name;
  }
  EXPECT_TRUE(Model::Load(model).ok());
  // Quantized at load, the dense copy of each projection stays readable for a later merge or
  // DoRA norm: releasing its pages (right for a file mapping) zeroed this heap copy before.
  LoadOptions options;
  options.quantize = LoadOptions::Quantization::kInt8;
  auto quantized = Model::Load(model, options);
  ASSERT_TRUE(quantized.ok()) << quantized.status().ToString();
  const Linear& q = (*quantized)->weights().layers[0].q_proj;
  ASSERT_TRUE(q.int8);
  auto want = (*original)->Get("model.layers.0.self_attn.q_proj.weight");
  ASSERT_TRUE(want.ok());
  ASSERT_EQ(q.weight.nbytes(), want->nbytes());
  EXPECT_EQ(std::memcmp(q.weight.data, want->data, want->nbytes()), 0);
}

// Releasing pages acts on file mappings only: heap memory keeps its values.
TEST(AdversarialWeights, ReleasingPagesOfHeapMemoryKeepsItsValues) {
  const size_t bytes = 64 << 10;
  std::vector<float> heap(bytes / sizeof(float), 1.5f);
  ReleaseMappedPages(heap.data(), bytes);
  for (float v : heap) ASSERT_EQ(v, 1.5f);
}

// config.json values crafted into a copy of a fixture's config, loaded through the folder.
TEST(AdversarialWeights, ConfigValuesOutsideCapsOrDomainsAreRefusedNamingTheField) {
  struct Case {
    const char* field;
    json value;
    const char* fragment;
  };
  const std::vector<Case> cases = {
      {"num_hidden_layers", 100000000, "field 'num_hidden_layers' is 100000000, above the maximum"},
      {"num_hidden_layers", 1e8, "field 'num_hidden_layers' is 100000000, above the maximum"},
      {"hidden_size", 2000000000, "field 'hidden_size' is 2000000000, above the maximum"},
      {"vocab_size", 2000000000, "field 'vocab_size' is 2000000000, above the maximum"},
      {"num_attention_heads", -1, "field 'num_attention_heads' is -1, below the minimum 1"},
      {"num_key_value_heads", "2", "field 'num_key_value_heads' must be an integer, got \"2\""},
      {"rope_theta", 0, "field 'rope_theta' must be positive"},
      {"rope_theta", -10000.0, "field 'rope_theta' must be positive"},
      {"rms_norm_eps", -1e-6, "field 'rms_norm_eps' must be in (0, 1)"},
      {"rms_norm_eps", 0, "field 'rms_norm_eps' must be in (0, 1)"},
      {"max_position_embeddings", 4294967297, "field 'max_position_embeddings' is 4294967297"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(c.field) + " = " + c.value.dump());
    TempDir dir;
    const std::string model = dir.Path("m");
    CopyDir(kFixtures + "/models/llama_f32", model);
    json cfg = json::parse(ReadBytes(model + "/config.json"));
    cfg[c.field] = c.value;
    WriteBytes(model + "/config.json", cfg.dump());
    const auto before = Snapshot(dir.path());
    EXPECT_STATUS(Model::Load(model).status(), StatusCode::kInvalidArgument,
                  model + "/config.json", c.fragment);
    EXPECT_EQ(Snapshot(dir.path()), before);
  }
}

TEST(AdversarialWeights, AdapterConfigWithStringAlphaOrDeepNestingIsRefused) {
  auto model = Model::Load(kFixtures + "/models/llama_f32");
  ASSERT_TRUE(model.ok());
  const std::string deep = std::string(200000, '[') + std::string(200000, ']');
  for (const auto& [field, raw, fragment] :
       std::vector<std::tuple<std::string, std::string, std::string>>{
           {"lora_alpha", "\"16\"", "field 'lora_alpha' must be a number, got \"16\""},
           {"lora_alpha", "1e999", "number overflow"},
           {"layers_to_transform", "[4294967297]", "is 4294967297, above the maximum"},
           {"zzz", deep, "JSON nested deeper than 32 levels"}}) {
    SCOPED_TRACE(field);
    TempDir dir;
    const std::string ad = dir.Path("a");
    CopyDir(kFixtures + "/adapters/llama_qv_r8_f32", ad);
    // The fixture's own value removed first (a duplicate key's last value wins).
    auto cfg = nlohmann::ordered_json::parse(ReadBytes(ad + "/adapter_config.json"));
    cfg.erase(field);
    std::string text = cfg.dump();
    text.insert(text.find('{') + 1, "\"" + field + "\": " + raw + ", ");
    WriteBytes(ad + "/adapter_config.json", text);
    const auto before = Snapshot(dir.path());
    auto a = LoadAdapter("x", ad, (*model)->sites(), 0);
    EXPECT_STATUS(a.status(), StatusCode::kInvalidArgument, "adapter 'x'", "adapter_config.json",
                  fragment);
    EXPECT_EQ(Snapshot(dir.path()), before);
  }
}

TEST(AdversarialWeights, ImpossibleAllocationsAreStatusesNotCrashes) {
  AlignedBuffer<float> buf;
  EXPECT_STATUS(buf.Resize(SIZE_MAX / 2), StatusCode::kResourceExhausted, "overflows");
  EXPECT_STATUS(buf.Resize(size_t{1} << 60), StatusCode::kResourceExhausted, "cannot allocate");
  EXPECT_EQ(buf.size(), 0u);
  ASSERT_TRUE(buf.Resize(10).ok());
  EXPECT_EQ(buf.size(), 10u);
  EXPECT_STATUS(KvCache::Create(1000, 1000, 1000, 1 << 30).status(), StatusCode::kResourceExhausted,
                "KV cache");
  EXPECT_STATUS(KvCache::Create(2, -1, 16, 4).status(), StatusCode::kInvalidArgument, "negative");
  auto model = Model::Load(kFixtures + "/models/llama_f32");
  ASSERT_TRUE(model.ok());
  EXPECT_TRUE((*model)->CheckKvCacheTokens(4096).ok());
  EXPECT_STATUS((*model)->CheckKvCacheTokens(2000000000), StatusCode::kInvalidArgument,
                "KV cache of 2000000000 tokens is outside");
  EXPECT_STATUS((*model)->CheckKvCacheTokens(-5), StatusCode::kInvalidArgument, "outside");
  // A step's working memory: config.json's widths × rows (a hostile config with 1024 heads of
  // 2048 took 16 MB a row and aborted on the allocation); refused naming the widths.
  EXPECT_TRUE((*model)->CheckStepMemory(512, 4096).ok());
  EXPECT_STATUS((*model)->CheckStepMemory(int64_t{1} << 40, 16), StatusCode::kResourceExhausted,
                "a forward step of 1099511627776 token rows needs", "hidden_size",
                "intermediate_size", "more than half of this machine's");
  EXPECT_STATUS((*model)->CheckStepMemory(1, int64_t{1} << 50), StatusCode::kResourceExhausted,
                "MiB of attention scores");
  EXPECT_STATUS((*model)->CheckStepMemory(0, 16), StatusCode::kInvalidArgument, "0 rows");
  // NewKvCache never returns null, even when the memory cannot be had.
  auto cache = (*model)->NewKvCache(64);
  ASSERT_NE(cache, nullptr);
  EXPECT_EQ(cache->num_blocks(), 4);
}

}  // namespace
}  // namespace loom
