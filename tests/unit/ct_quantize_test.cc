// `loom quantize` refusals: quantized inputs, unsupported schemes and groups, --out at or inside the input, a non-empty --out; each named, nothing written, no temporary folder left behind. And what it writes into quantization_config for MoE routers and groups --group-size does not divide.
#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <random>

#include "adversarial_util.h"
#include "engine/engine.h"
#include "io/safetensors.h"
#include "model/ct_checkpoint.h"
#include "tensor/dtype.h"

namespace loom {
namespace {

using namespace loom::testing;

class CtQuantizeRefusals : public ::testing::Test {
 protected:
  // Expects `loom quantize` of `model` into `out` to fail with `code` and every fragment, and
  // nothing under the temp folder to change.
  void ExpectRefused(const std::string& model, const std::string& out, QuantizeCheckpointOptions o,
                     StatusCode code, std::initializer_list<std::string> fragments) {
    SCOPED_TRACE(model + " -> " + out);
    const auto before = Snapshot(dir_.path());
    Status st = WriteQuantizedCheckpoint(model, o, out);
    EXPECT_EQ(st.code(), code) << st.ToString();
    for (const std::string& f : fragments) {
      EXPECT_TRUE(Contains(st.message(), f)) << "'" << f << "' not in: " << st.message();
    }
    EXPECT_EQ(Snapshot(dir_.path()), before);
  }
  static QuantizeCheckpointOptions Int8() { return {}; }
  static QuantizeCheckpointOptions Int4(int group) {
    QuantizeCheckpointOptions o;
    o.scheme = LoadOptions::Quantization::kInt4;
    o.group = group;
    return o;
  }
  TempDir dir_;
};

TEST_F(CtQuantizeRefusals, AlreadyQuantizedCheckpoints) {
  ExpectRefused(kFixtures + "/models/ct_w8a8_llama", dir_.Path("out"), Int8(),
                StatusCode::kFailedPrecondition,
                {"config.json", "quantization_config", "compressed-tensors", "quantized already"});
  // Any quant_method, named.
  const std::string gptq = dir_.Path("gptq");
  CopyDir(kFixtures + "/models/llama_bf16", gptq);
  std::string cfg = ReadBytes(gptq + "/config.json");
  cfg.insert(cfg.find('{') + 1, "\"quantization_config\": {\"quant_method\": \"gptq\", \"bits\": 4},");
  WriteBytes(gptq + "/config.json", cfg);
  ExpectRefused(gptq, dir_.Path("out"), Int4(32), StatusCode::kFailedPrecondition, {"'gptq'"});
}

TEST_F(CtQuantizeRefusals, UnsupportedSchemes) {
  QuantizeCheckpointOptions none;
  none.scheme = LoadOptions::Quantization::kNone;
  ExpectRefused(kFixtures + "/models/llama_bf16", dir_.Path("out"), none,
                StatusCode::kInvalidArgument, {"--scheme"});
  ExpectRefused(kFixtures + "/models/llama_bf16", dir_.Path("out"), Int4(64),
                StatusCode::kInvalidArgument, {"--group-size 64"});
}

// qwen3_moe (hidden 64, experts 24 wide, a dense MLP 96 wide in layer 1) with groups of 128:
// "Linear" gets 128 (the 128-input o_proj), config groups of exact names get 64 and 32; the
// routers and the experts (no group of 32 divides both 64 and 24) are in `ignore`, beside lm_head.
TEST_F(CtQuantizeRefusals, MoeRoutersAndRaggedGroupsInTheConfig) {
  const std::string out = dir_.Path("q4");
  ASSERT_TRUE(WriteQuantizedCheckpoint(kFixtures + "/models/qwen3_moe_bf16", Int4(128), out).ok());
  const nlohmann::json q = nlohmann::json::parse(ReadBytes(out + "/config.json"))["quantization_config"];
  const nlohmann::json& groups = q["config_groups"];
  ASSERT_EQ(groups.size(), 3u) << groups.dump();
  EXPECT_EQ(groups["group_0"]["targets"], nlohmann::json::array({"Linear"}));
  EXPECT_EQ(groups["group_0"]["weights"]["group_size"], 128);
  EXPECT_EQ(groups["group_1"]["weights"]["group_size"], 32);
  EXPECT_EQ(groups["group_1"]["targets"], nlohmann::json::array({"model.layers.1.mlp.down_proj"}));
  EXPECT_EQ(groups["group_2"]["weights"]["group_size"], 64);
  const nlohmann::json& g64 = groups["group_2"]["targets"];
  EXPECT_EQ(g64.size(), 3u * 3 + 2) << g64.dump();  // q/k/v of 3 layers, the dense MLP's gate/up
  EXPECT_NE(std::find(g64.begin(), g64.end(), "model.layers.1.mlp.up_proj"), g64.end());
  EXPECT_EQ(q["ignore"], nlohmann::json::parse(R"(["lm_head", "model.layers.0.mlp.gate",
      "model.layers.2.mlp.gate", "re:.*\\.experts\\.\\d+\\.(gate_proj|up_proj|down_proj)$"])"));
  // The written tensors follow: routers' and experts' dense weights, packed int4 elsewhere.
  const std::string st = ReadBytes(out + "/model.safetensors");
  EXPECT_TRUE(Contains(st, "\"model.layers.0.mlp.gate.weight\""));
  EXPECT_TRUE(Contains(st, "\"model.layers.0.mlp.experts.0.gate_proj.weight\""));
  EXPECT_TRUE(Contains(st, "\"model.layers.1.mlp.gate_proj.weight_packed\""));
}

// 64-wide experts (make_moe_w64.py, Mixtral): with groups of 128 all of a layer's experts take
// 64, in a config group whose one "re:" target names the experts (how transformers finds their scheme);
// with groups of 32 they are in "Linear"'s group and only the routers are ignored.
TEST_F(CtQuantizeRefusals, MoeExpertsInAConfigGroupOfTheirOwn) {
  const std::string model = kFixtures + "/models/mixtral_w64_bf16";
  // Mixtral's names, and the ones vLLM looks the experts' scheme up under
  const std::string pattern = "re:.*\\.experts\\.\\d+\\.(w1|w3|w2|gate_proj|up_proj|down_proj)$";
  ASSERT_TRUE(WriteQuantizedCheckpoint(model, Int4(128), dir_.Path("g128")).ok());
  nlohmann::json q = nlohmann::json::parse(ReadBytes(dir_.Path("g128") + "/config.json"))["quantization_config"];
  ASSERT_EQ(q["config_groups"].size(), 3u) << q.dump();  // group_1: the 64-input attention, by name
  EXPECT_EQ(q["config_groups"]["group_1"]["targets"].size(), 12u);
  EXPECT_EQ(q["config_groups"]["group_2"]["targets"], nlohmann::json::array({pattern}));
  EXPECT_EQ(q["config_groups"]["group_2"]["weights"]["group_size"], 64);
  EXPECT_EQ(q["ignore"], nlohmann::json::parse(R"(["lm_head", "model.layers.0.block_sparse_moe.gate",
      "model.layers.1.block_sparse_moe.gate", "model.layers.2.block_sparse_moe.gate"])"));
  ASSERT_TRUE(WriteQuantizedCheckpoint(model, Int4(32), dir_.Path("g32")).ok());
  q = nlohmann::json::parse(ReadBytes(dir_.Path("g32") + "/config.json"))["quantization_config"];
  EXPECT_EQ(q["config_groups"].size(), 1u) << q.dump();
  EXPECT_TRUE(Contains(ReadBytes(dir_.Path("g32") + "/model.safetensors"),
                       "\"model.layers.2.block_sparse_moe.experts.3.w2.weight_packed\""));
}

// What llm-compressor writes for a MoE: the routers ignored by one pattern (its recipes' usual
// `ignore: ["lm_head", "re:.*mlp.gate$"]`) and the experts under "Linear" — read as loom's own
// config (exact router names): the same projections quantized, the same logits.
TEST_F(CtQuantizeRefusals, ReadsAnLlmCompressorStyleMoeConfig) {
  const std::string out = dir_.Path("q4");
  ASSERT_TRUE(WriteQuantizedCheckpoint(kFixtures + "/models/qwen3_moe_w64_bf16", Int4(32), out).ok());
  const std::string theirs = dir_.Path("theirs");
  CopyDir(out, theirs);
  nlohmann::json cfg = nlohmann::json::parse(ReadBytes(theirs + "/config.json"));
  ASSERT_EQ(cfg["quantization_config"]["ignore"].size(), 3u);  // lm_head and two routers by name
  cfg["quantization_config"]["ignore"] = {"lm_head", "re:.*mlp.gate$"};
  WriteBytes(theirs + "/config.json", cfg.dump(2));
  auto a = Model::Load(out);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  auto b = Model::Load(theirs);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ((*a)->quantized_bytes(), (*b)->quantized_bytes());
  for (const LayerWeights& l : (*b)->weights().layers) {
    if (l.moe.experts.empty()) continue;
    EXPECT_FALSE(l.moe.router.int4);
    EXPECT_TRUE(l.moe.experts.back().down.int4);
  }
  // Without the router in `ignore`, "Linear" claims it, and its dense .weight is named.
  cfg["quantization_config"]["ignore"] = {"lm_head"};
  WriteBytes(theirs + "/config.json", cfg.dump(2));
  auto c = Model::Load(theirs);
  ASSERT_FALSE(c.ok());
  EXPECT_TRUE(Contains(c.status().message(), "model.layers.0.mlp.gate")) << c.status().message();
}

// A Llama 48 wide (written here, random bf16): no int4 group of 32 divides 48, so q/k/v/o,
// gate/up and — with --quantize-head — lm_head stay dense and must be in `ignore` (else "Linear"
// would claim the dense head and no reader could load the folder); down_proj (64 inputs) takes
// 64. The written folder serves the same logits as --quantize int4 at load.
TEST_F(CtQuantizeRefusals, ProjectionsNoGroupFitsStayDenseAndAreIgnored) {
  const std::string model = dir_.Path("llama48");
  fs::create_directories(model);
  WriteBytes(model + "/config.json", R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama",
      "hidden_size": 48, "intermediate_size": 64, "num_attention_heads": 3, "num_key_value_heads": 1,
      "head_dim": 16, "num_hidden_layers": 1, "vocab_size": 64, "rms_norm_eps": 1e-5,
      "max_position_embeddings": 64, "rope_theta": 10000.0, "tie_word_embeddings": false,
      "hidden_act": "silu", "bos_token_id": 1, "eos_token_id": 2})");
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.0f, 0.2f);
  std::vector<std::pair<std::string, std::vector<int64_t>>> shapes = {
      {"model.embed_tokens.weight", {64, 48}}, {"model.norm.weight", {48}}, {"lm_head.weight", {64, 48}},
      {"model.layers.0.input_layernorm.weight", {48}}, {"model.layers.0.post_attention_layernorm.weight", {48}},
      {"model.layers.0.self_attn.q_proj.weight", {48, 48}}, {"model.layers.0.self_attn.k_proj.weight", {16, 48}},
      {"model.layers.0.self_attn.v_proj.weight", {16, 48}}, {"model.layers.0.self_attn.o_proj.weight", {48, 48}},
      {"model.layers.0.mlp.gate_proj.weight", {64, 48}}, {"model.layers.0.mlp.up_proj.weight", {64, 48}},
      {"model.layers.0.mlp.down_proj.weight", {48, 64}}};
  std::vector<std::vector<uint16_t>> data;
  std::vector<TensorToWrite> tensors;
  for (const auto& [name, shape] : shapes) {
    std::vector<uint16_t>& d = data.emplace_back();
    for (int64_t i = 0, n = shape.size() == 1 ? shape[0] : shape[0] * shape[1]; i < n; ++i) {
      d.push_back(F32ToBf16(shape.size() == 1 ? 1.0f + nd(rng) : nd(rng)));
    }
  }
  for (size_t i = 0; i < shapes.size(); ++i) {
    tensors.push_back({shapes[i].first, DType::kBF16, shapes[i].second, data[i].data()});
  }
  ASSERT_TRUE(WriteSafetensors(model + "/model.safetensors", tensors).ok());
  QuantizeCheckpointOptions o = Int4(128);
  o.quantize_head = true;
  const std::string out = dir_.Path("q4");
  Status st = WriteQuantizedCheckpoint(model, o, out);
  ASSERT_TRUE(st.ok()) << st.ToString();
  const nlohmann::json q = nlohmann::json::parse(ReadBytes(out + "/config.json"))["quantization_config"];
  EXPECT_EQ(q["ignore"].size(), 7u) << q["ignore"].dump();
  EXPECT_NE(std::find(q["ignore"].begin(), q["ignore"].end(), "lm_head"), q["ignore"].end());
  EXPECT_EQ(q["config_groups"]["group_1"]["targets"], nlohmann::json::array({"model.layers.0.mlp.down_proj"}));
  LoadOptions at_load;
  at_load.quantize = LoadOptions::Quantization::kInt4;
  at_load.quantize_head = true;
  auto a = Model::Load(model, at_load);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  auto b = Model::Load(out);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ((*a)->quantized_bytes(), (*b)->quantized_bytes());
  EXPECT_FALSE((*b)->weights().lm_head.int4);
  ASSERT_TRUE((*b)->weights().layers[0].down_proj.int4);
  EXPECT_EQ((*b)->weights().layers[0].down_proj.int4->group, 64);
  std::vector<float> logits[2];
  Model* models[2] = {a->get(), b->get()};
  for (int side = 0; side < 2; ++side) {
    Engine engine(models[side], EngineOptions{});
    GenerationRequest r;
    r.prompt = {3, 9, 27, 17, 51};
    r.params.max_tokens = 1;
    r.return_prompt_logits = true;
    ASSERT_TRUE(engine.Add(r).ok());
    logits[side] = engine.RunToCompletion().at(0).prompt_logits;
  }
  ASSERT_EQ(logits[0].size(), 5u * 64);
  EXPECT_EQ(logits[0], logits[1]);
}

TEST_F(CtQuantizeRefusals, NeverWritesIntoItsInput) {
  const std::string model = dir_.Path("model");
  CopyDir(kFixtures + "/models/llama_bf16", model);
  ExpectRefused(model, model, Int8(), StatusCode::kInvalidArgument,
                {"is the model folder", "loom quantize never writes into its inputs"});
  ExpectRefused(model, model + "/./", Int8(), StatusCode::kInvalidArgument, {"is the model folder"});
  ExpectRefused(model, model + "/q8", Int8(), StatusCode::kInvalidArgument, {"inside the model folder"});
  fs::create_directories(dir_.Path("full"));
  WriteBytes(dir_.Path("full") + "/model.safetensors", "stale");
  ExpectRefused(model, dir_.Path("full"), Int8(), StatusCode::kInvalidArgument,
                {"is not empty", "loom quantize"});
}

TEST_F(CtQuantizeRefusals, SuccessLeavesOnlyTheOutputFolder) {
  const std::string out = dir_.Path("q8");
  ASSERT_TRUE(WriteQuantizedCheckpoint(kFixtures + "/models/llama_bf16", Int8(), out).ok());
  std::vector<std::string> entries;
  for (const auto& e : fs::directory_iterator(dir_.path())) entries.push_back(e.path().filename());
  EXPECT_EQ(entries, std::vector<std::string>{"q8"});  // no ".q8.loom-quantize-XXXXXX" left
  for (const char* f : {"config.json", "generation_config.json", "model.safetensors"}) {
    EXPECT_TRUE(fs::is_regular_file(fs::path(out) / f)) << f;
  }
}

TEST_F(CtQuantizeRefusals, Cli) {
  const std::string out = dir_.Path("q4");
  RunResult r = RunLoom("quantize --model " + kFixtures + "/models/qwen2_bf16 --out " + out +
                        " --scheme int4 --group-size 32 --quantize-head");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(Contains(r.output, "pack-quantized W4A16")) << r.output;
  // Departures from --group-size are said, with an example.
  r = RunLoom("quantize --model " + kFixtures + "/models/qwen3_moe_bf16 --out " + dir_.Path("moe") +
              " --scheme int4 --group-size 128");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  // In loom quantize's own flags (the note named --quantize, which the command does not take),
  // and the summary line says the groups as written (it said "int4 group 128" alone).
  for (const char* f :
       {"note: --scheme int4: 11 projection(s) take int4 groups of 64 (--group-size 128 does not "
        "divide",
        "note: --scheme int4: 1 projection(s) take int4 groups of 32 (--group-size 128 does not "
        "divide their inputs), e.g. model.layers.1.mlp.down_proj",
        "int4 group 128; g32 on 1, g64 on 11, dense on 50",
        "note: --scheme int4: 2 projection(s) stay dense (mixture-of-experts routers",
        "48 projection(s) stay dense (experts: no int4 group of 32 divides both their input "
        "widths)"}) {
    EXPECT_TRUE(Contains(r.output, f)) << f << " not in " << r.output;
  }
  // The same departures, counted, for labels (loom perplexity's "int4 g128 (...)"): not g128 alone.
  LoadOptions q4;
  q4.quantize = LoadOptions::Quantization::kInt4;
  q4.quantize_group = 128;
  auto moe = Model::Load(kFixtures + "/models/qwen3_moe_bf16", q4);
  ASSERT_TRUE(moe.ok()) << moe.status().message();
  EXPECT_EQ((*moe)->quantize_departures(), "g32 on 1, g64 on 11, dense on 50");
  q4.quantize_group = 32;
  auto dense = Model::Load(kFixtures + "/models/llama_bf16", q4);
  ASSERT_TRUE(dense.ok()) << dense.status().message();
  EXPECT_EQ((*dense)->quantize_departures(), "") << "every projection takes g32";
  r = RunLoom("inspect --model " + out);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(Contains(r.output, "compressed-tensors W4A16 (int4 g32)")) << r.output;
  // The global --quantize is not loom quantize's flag; a refusal exits 2 and names the cause.
  r = RunLoom("--quantize int8 quantize --model " + kFixtures + "/models/llama_bf16 --out " +
              dir_.Path("x") + " --scheme int8");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(Contains(r.output, "loom quantize does not take --quantize")) << r.output;
  // Nor any other global quantize flag, before or after the command (it was ignored: the
  // checkpoint said group_size 128 for --quantize-group-size 32).
  for (const char* args : {"--quantize-head quantize", "quantize --quantize-group-size 32",
                           "quantize --quantize-double-quant"}) {
    r = RunLoom(std::string(args) + " --model " + kFixtures + "/models/llama_bf16 --out " + dir_.Path("x") +
                " --scheme int4");
    EXPECT_EQ(r.exit_code, 2) << args << ": " << r.output;
    EXPECT_TRUE(Contains(r.output, "loom quantize does not take --quantize")) << r.output;
  }
  r = RunLoom("--quantize int8 merge --model " + kFixtures + "/models/llama_bf16 --lora " +
              kFixtures + "/adapters/llama_qv_r8_f32 --out " + dir_.Path("x"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(Contains(r.output, "loom merge does not take --quantize")) << r.output;
  r = RunLoom("quantize --model " + out + " --out " + dir_.Path("y") + " --scheme int8");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(Contains(r.output, "quantized already")) << r.output;
  EXPECT_FALSE(fs::exists(dir_.Path("x")));
  EXPECT_FALSE(fs::exists(dir_.Path("y")));
}

}  // namespace
}  // namespace loom
