// `loom quantize` refusals: quantized inputs, MoE models, groups that do not divide a projection, --out at or inside the input, a non-empty --out; each named, nothing written, no temporary folder left behind.
#include <gtest/gtest.h>

#include "adversarial_util.h"
#include "model/ct_checkpoint.h"

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

TEST_F(CtQuantizeRefusals, MixtureOfExpertsAndUnsupportedSchemes) {
  ExpectRefused(kFixtures + "/models/qwen3_moe_bf16", dir_.Path("out"), Int8(),
                StatusCode::kInvalidArgument, {"Qwen3MoeForCausalLM", "mixture-of-experts"});
  QuantizeCheckpointOptions none;
  none.scheme = LoadOptions::Quantization::kNone;
  ExpectRefused(kFixtures + "/models/llama_bf16", dir_.Path("out"), none,
                StatusCode::kInvalidArgument, {"--scheme"});
  ExpectRefused(kFixtures + "/models/llama_bf16", dir_.Path("out"), Int4(64),
                StatusCode::kInvalidArgument, {"--group-size 64"});
  // Hidden 64: groups of 128 cannot be stored whole (loom pads at load; the format cannot).
  ExpectRefused(kFixtures + "/models/llama_bf16", dir_.Path("out"), Int4(128),
                StatusCode::kInvalidArgument,
                {"model.layers.0.mlp.gate_proj", "64 input features", "--group-size 128"});
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
  r = RunLoom("inspect --model " + out);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(Contains(r.output, "compressed-tensors W4A16 (int4 g32)")) << r.output;
  // The global --quantize is not loom quantize's flag; a refusal exits 2 and names the cause.
  r = RunLoom("--quantize int8 quantize --model " + kFixtures + "/models/llama_bf16 --out " +
              dir_.Path("x") + " --scheme int8");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(Contains(r.output, "not the global --quantize")) << r.output;
  r = RunLoom("quantize --model " + out + " --out " + dir_.Path("y") + " --scheme int8");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(Contains(r.output, "quantized already")) << r.output;
  EXPECT_FALSE(fs::exists(dir_.Path("x")));
  EXPECT_FALSE(fs::exists(dir_.Path("y")));
}

}  // namespace
}  // namespace loom
