// LoadAdapter rejects every corruption of a fixture adapter with its message; dtypes and content_hash.
#include "unit/adapter_test_util.h"

namespace loom {
namespace {
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

// An alpha_pattern that backtracks past the step limit on a module name: before, the timed-out
// match counted as "no match" and the module silently got the default alpha (a wrong scale).
TEST_F(CorruptAdapterTest, AnAlphaPatternPastTheRegexStepLimitIsAnError) {
  draft_.config["alpha_pattern"] = {{"(?:[a-z_.0-9]+)+[XY]", 3}};
  ExpectRejected({"adapter_config.json alpha_pattern", "(?:[a-z_.0-9]+)+[XY]",
                  "took more than 100000 backtracking steps on 'model.layers.", "simplify the pattern"});
}

TEST_F(CorruptAdapterTest, ATargetModulesRegexPastTheStepLimitIsAnError) {
  draft_.config["target_modules"] = "(?:[a-z_.0-9]+)+[XY]|.*(q|v)_proj";
  ExpectRejected({"adapter_config.json target_modules", "took more than 100000 backtracking steps"});
}

// The audit's case: PEFT applies alpha_pattern {"layers\.[0-9]{,1}\.self_attn\.q_proj": 3} to
// q_proj of layers 0..9 (Python reads {,1} as {0,1}); PCRE2 read "{,1}" as text and left every
// module at lora_alpha 16, silently.
TEST_F(CorruptAdapterTest, AnAlphaPatternKeyInPythonSyntaxIsApplied) {
  draft_.config["alpha_pattern"] = {{R"(layers\.[0-9]{,1}\.self_attn\.q_proj)", 3}};
  WriteDraft(draft_, tmp_.File("a"));
  auto a = Load(tmp_.File("a"), FixtureModel("llama_f32"));
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  int q = 0;
  for (const LoraWeights* lw : (*a)->modules()) {
    const bool is_q = lw->module_path.ends_with(".q_proj");
    q += is_q;
    EXPECT_FLOAT_EQ(lw->scale, is_q ? 3.0f / 8 : 16.0f / 8) << lw->module_path;
  }
  EXPECT_EQ(q, 3);
}

// Targets that match nothing are listed in the message, clipped and escaped (they are file text).
TEST_F(CorruptAdapterTest, TargetsThatMatchNothingAreQuotedClippedAndEscaped) {
  std::vector<std::string> targets(1000, "\x1b[2J" + std::string(1000, 'w'));
  draft_.config["target_modules"] = targets;
  const std::string dir = tmp_.File("bad");
  WriteDraft(draft_, dir);
  auto a = Load(dir, FixtureModel("llama_f32"));
  ASSERT_FALSE(a.ok());
  const std::string& m = a.status().message();
  EXPECT_TRUE(Contains(m, "target_modules [\\x1b[2Jwww")) << m.substr(0, 300);
  EXPECT_TRUE(Contains(m, "match no module of"));
  EXPECT_EQ(m.find('\x1b'), std::string::npos);
  EXPECT_LT(m.size(), 1000u);
}

// PEFT raises "Target module ... is not supported" for a matched module that is not a linear
// projection or an embedding; loom ignored such an entry beside the others (q and v loaded).
TEST_F(CorruptAdapterTest, ATargetThatNamesANormOrABlockIsRefusedAsPeftRefusesIt) {
  const std::vector<std::pair<ojson, std::string>> cases = {
      {ojson({"q_proj", "v_proj", "norm"}), "'model.norm'"},
      {ojson({"q_proj", "v_proj", "input_layernorm"}), "'model.layers.0.input_layernorm'"},
      {ojson({"q_proj", "v_proj", "mlp"}), "'model.layers.0.mlp'"},
      {ojson({"q_proj", "v_proj", "layers.1"}), "'model.layers.1'"},
      {ojson(R"(.*\.(q_proj|v_proj|self_attn))"), "'model.layers.0.self_attn'"},
  };
  for (const auto& [targets, module] : cases) {
    SCOPED_TRACE(targets.dump());
    draft_.config["target_modules"] = targets;
    ExpectRejected(
        {"target_modules match " + module, "not a linear projection", "PEFT refuses it"});
  }
  // Excluded, it is not targeted (PEFT checks exclude_modules first).
  draft_.config["target_modules"] = {"q_proj", "v_proj", "norm"};
  draft_.config["exclude_modules"] = {"norm"};
  WriteDraft(draft_, tmp_.File("excluded"));
  EXPECT_TRUE(Load(tmp_.File("excluded"), FixtureModel("llama_f32")).ok());
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

// A layer index past any int (std::stoi aborted the process on it once): a clear error.
TEST_F(CorruptAdapterTest, LayerIndexPastAnyIntIsAClearError) {
  const std::string key = "base_model.model.model.layers.99999999999999999999.self_attn.q_proj.";
  draft_.Add(key + "lora_A.weight", {8, 64});
  draft_.Add(key + "lora_B.weight", {64, 8});
  ExpectRejected({"tensor " + key + "lora_A.weight adapts module "
                  "'model.layers.99999999999999999999.self_attn.q_proj', which LlamaForCausalLM "
                  "does not have"});
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
  // The same weight with and without an embedded adapter name: two namings in one file.
  draft_.Add(Key(0, "q_proj", "lora_A.default.weight"), {8, 64});
  ExpectRejected({Key(0, "q_proj", "lora_A.default.weight") + " (adapter name 'default')",
                  "(no adapter name)", "are named differently; save one adapter per folder"});
  // Both named alike (one without PEFT's base_model.model. prefix): the same weight twice.
  CorruptAdapterTest::SetUp();
  const std::string full = Key(0, "q_proj", "lora_A.weight");
  const std::string bare = full.substr(std::strlen("base_model.model."));
  draft_.Add(bare, {8, 64});
  ExpectRejected({" and ", "are the same weight"});
}

TEST_F(CorruptAdapterTest, UnexpectedTensorNameAfterTheLoraPart) {
  draft_.Add(Key(0, "q_proj", "lora_A.weight.extra"), {8, 64});
  ExpectRejected({"tensor " + Key(0, "q_proj", "lora_A.weight.extra") + " has an unexpected name"});
}

// Review findings: a word after lora_A / lora_B was taken for an embedded adapter name, so
// ...lora_A.foo loaded as lora_A, and ...lora_A.weight_extra was called a duplicate of
// ...lora_A.weight; a single tensor named for another adapter was loaded with the others.
TEST_F(CorruptAdapterTest, AWordAfterTheLoraPartIsNotAnAdapterName) {
  for (const char* tail : {"lora_A.foo", "lora_A.weight_extra", "lora_B.weights"}) {
    SCOPED_TRACE(tail);
    CorruptAdapterTest::SetUp();
    draft_.Add(Key(1, "k_proj", tail), {8, 64});
    ExpectRejected({"tensor " + Key(1, "k_proj", tail) + " has an unexpected name",
                    "followed by weight or bias"});
  }
}

TEST_F(CorruptAdapterTest, OneTensorNamedForAnotherAdapter) {
  for (auto& t : draft_.tensors) {
    const size_t at = t.name.find(".layers.1.self_attn.v_proj.lora_A.weight");
    if (at != std::string::npos) t.name.replace(t.name.size() - 7, 7, ".other.weight");
  }
  ExpectRejected({"(adapter name 'other')", "(no adapter name)", "are named differently"});
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

// DoRA on an embedding (PEFT's DoraEmbeddingLayer): the magnitude is per embedding dimension
// ([model_dim]), not per token; a vocabulary-long one is refused naming the tensor.
TEST(CorruptAdapterFileTest, DoraOnAnEmbeddingNeedsAMagnitudePerDimension) {
  Draft d = ReadDraft(kAdapters + "llama_embed");
  std::erase_if(d.tensors, [](const DraftTensor& t) {
    return t.name.find("embed_tokens") == std::string::npos;
  });
  d.config["target_modules"] = ojson::array({"embed_tokens"});
  d.Add("base_model.model.model.embed_tokens.lora_magnitude_vector", {256}, 1.0f);
  d.config["use_dora"] = true;
  TempDir tmp;
  WriteDraft(d, tmp.File("a"));
  auto a = Load(tmp.File("a"), FixtureModel("llama_f32"));
  ASSERT_FALSE(a.ok());
  EXPECT_TRUE(Contains(a.status().message(),
                       "tensor base_model.model.model.embed_tokens.lora_magnitude_vector has shape "
                       "[256], the base model needs [64]"))
      << a.status().message();
  d.Find("base_model.model.model.embed_tokens.lora_magnitude_vector")->shape = {64};
  d.Find("base_model.model.model.embed_tokens.lora_magnitude_vector")->values.resize(64);
  WriteDraft(d, tmp.File("b"));
  auto b = Load(tmp.File("b"), FixtureModel("llama_f32"));
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  ASSERT_NE((*b)->embedding(), nullptr);
  EXPECT_EQ((*b)->embedding()->dora_gain.size(), 64u);
  // use_dora without the magnitude: refused as on a projection (it was served as plain LoRA).
  d.Remove("base_model.model.model.embed_tokens.lora_magnitude_vector");
  WriteDraft(d, tmp.File("c"));
  auto c = Load(tmp.File("c"), FixtureModel("llama_f32"));
  ASSERT_FALSE(c.ok());
  EXPECT_TRUE(
      Contains(c.status().message(),
               "module 'model.embed_tokens' has no lora_magnitude_vector but use_dora is true"))
      << c.status().message();
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
  // A broken adapter (400 as vLLM's "doesn't contain tensors"), not a missing one (404).
  EXPECT_EQ(none.status().code(), StatusCode::kInvalidArgument) << none.status().ToString();
  EXPECT_TRUE(Contains(
      none.status().message(),
      "adapter 'bad': " + dir + " has adapter_config.json but no adapter_model.safetensors"));

  WriteDraft(d, dir);
  fs::remove(dir + "/adapter_config.json");
  auto no_config = Load(dir, model);
  ASSERT_FALSE(no_config.ok());
  EXPECT_EQ(no_config.status().code(), StatusCode::kNotFound);  // no adapter there: 404
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

// Review finding: an adapter whose every lora_B is zero, or whose lora_alpha is 0, loaded
// without a word. PEFT serves it too (an untrained adapter), so it loads, with a warning.
TEST(AdapterNoEffectTest, ZeroBOrZeroAlphaIsSaid) {
  Model& model = FixtureModel("llama_f32");
  TempDir tmp;
  const Draft fixture = ReadDraft(kAdapters + "llama_qv_r8_f32");
  WriteDraft(fixture, tmp.File("trained"));
  auto trained = Load(tmp.File("trained"), model);
  ASSERT_TRUE(trained.ok()) << trained.status().ToString();
  EXPECT_FALSE(ChangesNothing(**trained));

  Draft zero_b = fixture;
  for (auto& t : zero_b.tensors) {
    if (Contains(t.name, "lora_B")) std::fill(t.values.begin(), t.values.end(), -0.0f);
  }
  WriteDraft(zero_b, tmp.File("zero_b"));
  auto a = Load(tmp.File("zero_b"), model);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_TRUE(ChangesNothing(**a));

  Draft one_b = zero_b;  // one non-zero element is an effect
  for (auto& t : one_b.tensors) {
    if (Contains(t.name, "layers.1.self_attn.v_proj.lora_B")) t.values[5] = 1e-30f;
  }
  WriteDraft(one_b, tmp.File("one_b"));
  auto b = Load(tmp.File("one_b"), model);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_FALSE(ChangesNothing(**b));

  Draft zero_alpha = fixture;
  zero_alpha.config["lora_alpha"] = 0;
  WriteDraft(zero_alpha, tmp.File("zero_alpha"));
  auto c = Load(tmp.File("zero_alpha"), model);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_TRUE(ChangesNothing(**c));
}

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

// SPEC-adapters §5: unknown config keys are ignored with a log line, and a
// base_model_name_or_path other than the served model is a warning only; each note once.
TEST(AdapterNotesTest, UnknownKeysAndAnotherBaseAreNotedOnce) {
  Draft d = ReadDraft(kAdapters + "llama_embed");
  d.config["a_future_peft_key"] = 1;
  d.config["base_model_name_or_path"] = "Org/Some-Other-Model";
  TempDir tmp;
  WriteDraft(d, tmp.File("a"));
  auto a = Load(tmp.File("a"), FixtureModel("llama_f32"));
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  testing::internal::CaptureStderr();
  NoteAdapterConfig(**a, kModels + "llama_f32");
  NoteAdapterConfig(**a, kModels + "llama_f32");
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_TRUE(Contains(err, "keys loom does not know, ignored: a_future_peft_key")) << err;
  EXPECT_TRUE(Contains(err, "base_model_name_or_path 'Org/Some-Other-Model' is not the served "
                            "model's folder 'llama_f32'"))
      << err;
  EXPECT_EQ(err.find("a_future_peft_key"), err.rfind("a_future_peft_key")) << err;  // once
  // The same folder name in another case or under an org prefix is no warning.
  d.config.erase("a_future_peft_key");
  d.config["base_model_name_or_path"] = "someone/LLAMA_F32";
  WriteDraft(d, tmp.File("b"));
  auto b = Load(tmp.File("b"), FixtureModel("llama_f32"));
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  testing::internal::CaptureStderr();
  NoteAdapterConfig(**b, kModels + "llama_f32/");
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
  // The folder given as "." is named by the working folder (and a trailing slash is no name).
  EXPECT_EQ(ModelFolderName("/models/Qwen2.5-0.5B/"), "qwen2.5-0.5b");
  EXPECT_EQ(ModelFolderName("."), ModelFolderName(fs::current_path().string()));
  EXPECT_FALSE(TrainedOnAnotherBase((*b)->config(), kModels + "llama_f32/."));
  EXPECT_TRUE(TrainedOnAnotherBase((*a)->config(), kModels + "llama_f32"));
}

}  // namespace
}  // namespace loom
