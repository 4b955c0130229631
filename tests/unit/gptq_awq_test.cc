// GPTQ / AWQ checkpoints: config fields handled or rejected by name, and every corrupt tensor (shape, dtype, length, g_idx range, zero points) a clear error naming it — nothing loads.
#include "model/gptq.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "checkpoint_edit_util.h"
#include "model/model.h"

namespace loom {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const std::string kModels = std::string(LOOM_FIXTURES) + "/models/";

std::string ParseError(json qc) {
  auto c = GptqConfig::Parse(qc, "config.json");
  return c.ok() ? "" : c.status().message();
}

json Gptq() {
  return {{"quant_method", "gptq"}, {"bits", 4}, {"group_size", 128}, {"desc_act", false}, {"sym", true},
          {"true_sequential", true}, {"checkpoint_format", "gptq"}, {"meta", {{"quantizer", {"x"}}}}};
}
json Awq() {
  return {{"quant_method", "awq"}, {"bits", 4}, {"group_size", 128}, {"zero_point", true}, {"version", "gemm"},
          {"modules_to_not_convert", nullptr}};
}

TEST(GptqConfig, ParsesAndRejectsByName) {
  EXPECT_EQ(ParseError(Gptq()), "");
  EXPECT_EQ(ParseError(Awq()), "");
  auto g = GptqConfig::Parse(Gptq(), "c");
  ASSERT_TRUE(g.ok());
  EXPECT_FALSE(g->v2);
  struct Case {
    std::function<void(json&)> edit;
    bool awq;
    const char* message;
  } cases[] = {
      {[](json& q) { q["bits"] = 8; }, false, "bits is 8; loom serves 4-bit GPTQ/AWQ only"},
      {[](json& q) { q["bits"] = 3; }, false, "bits is 3"},
      {[](json& q) { q["group_size"] = 48; }, false, "group_size is 48"},
      // 2^64 − 1 read as an int64 is −1 (per channel): refused as the number it is.
      {[](json& q) { q["group_size"] = 18446744073709551615ULL; }, false,
       "group_size is 18446744073709551615"},
      {[](json& q) { q["checkpoint_format"] = "marlin"; }, false,
       "checkpoint_format is \"marlin\""},
      // The two names disagreeing: v1 against v2 moves every zero point by one (review finding).
      {[](json& q) { q["format"] = "gptq_v2"; }, false,
       "checkpoint_format is \"gptq\" but format is \"gptq_v2\"; they must agree"},
      {[](json& q) {
         q["dynamic"] = {{"x", 1}};
       },
       false, "dynamic is"},
      {[](json& q) { q["shiny"] = 1; }, false, "field 'shiny' (1) is not one loom knows"},
      {[](json& q) { q["pack_dtype"] = "int16"; }, false, "pack_dtype is \"int16\""},
      {[](json& q) { q["version"] = "gemv"; }, true, "version is \"gemv\""},
      {[](json& q) { q["version"] = "exllama"; }, true, "version is \"exllama\""},
      {[](json& q) { q["zero_point"] = false; }, true, "zero_point is false"},
      {[](json& q) { q["group_size"] = -1; }, true, "group_size is -1"},
      {[](json& q) { q["sparkle"] = true; }, true, "field 'sparkle' (true) is not one loom knows"},
      // AutoAWQ's spellings beside transformers': both present, they must agree.
      {[](json& q) { q["w_bit"] = 3; }, true, "bits is 4 but w_bit is 3; the two spellings"},
      {[](json& q) { q["q_group_size"] = 64; }, true, "group_size is 128 but q_group_size is 64"},
  };
  for (const Case& c : cases) {
    json q = c.awq ? Awq() : Gptq();
    c.edit(q);
    const std::string err = ParseError(q);
    EXPECT_NE(err.find(c.message), std::string::npos) << "want '" << c.message << "'\n got '" << err << "'";
  }
  json both = Awq();  // both spellings, agreeing: read as one
  both["w_bit"] = 4;
  both["q_group_size"] = 128;
  EXPECT_EQ(ParseError(both), "");
  json v2 = Gptq();
  v2["checkpoint_format"] = "gptq_v2";
  v2["group_size"] = -1;
  auto p = GptqConfig::Parse(v2, "c");
  ASSERT_TRUE(p.ok());
  EXPECT_TRUE(p->v2);
  EXPECT_EQ(p->group_size, -1);
}

using testutil::LoadError;
using testutil::RawFile;
using testutil::RawTensor;

std::string EditedCopy(const std::string& name, const std::function<void(json&)>& edit_config,
                       const std::function<void(RawFile&)>& edit_tensors) {
  return testutil::EditedCheckpointCopy(kModels, "gptq_corrupt_", name, edit_config, edit_tensors);
}

const std::string kQ = "model.layers.0.self_attn.q_proj";

TEST(GptqCorrupt, EachMismatchIsAClearErrorNamingTheTensor) {
  auto none = [](json&) {};
  auto keep = [](RawFile&) {};
  auto set_i32 = [](RawTensor& t, size_t index, int32_t v) { std::memcpy(t.bytes.data() + 4 * index, &v, 4); };
  struct Case {
    const char* model;
    std::function<void(json&)> config;
    std::function<void(RawFile&)> tensors;
    const char* message;
  } cases[] = {
      {"gptq_llama_g32_act", none, keep, ""},
      {"gptq_qwen2_g128_sym", none, keep, ""},
      {"awq_qwen2_g32", none, keep, ""},
      // Wrong group size: the scales no longer fit.
      {"gptq_llama_g32_act", [](json& q) { q["group_size"] = 64; }, keep,
       "tensor 'model.layers.0.self_attn.q_proj.qzeros' has dtype I32 and shape [2, 8]"},
      {"awq_qwen2_g32", [](json& q) { q["group_size"] = 64; }, keep,
       "tensor 'model.layers.0.self_attn.q_proj.qzeros' has dtype I32 and shape [2, 8]"},
      // Scales of the wrong shape / dtype.
      {"gptq_llama_g32_act", none, [](RawFile& r) { r[kQ + ".scales"].shape = {1, 128}; },
       "tensor 'model.layers.0.self_attn.q_proj.scales' has dtype F16 and shape [1, 128]"},
      {"awq_qwen2_g32", none, [](RawFile& r) { r[kQ + ".scales"].dtype = "I16"; },
       "tensor 'model.layers.0.self_attn.q_proj.scales' has dtype I16"},
      // Packed tensors of the wrong length.
      {"gptq_llama_g32_act", none, [](RawFile& r) {
         RawTensor& t = r[kQ + ".qweight"];
         t.shape = {7, 64};
         t.bytes.resize(7 * 64 * 4);
       }, "tensor 'model.layers.0.self_attn.q_proj.qweight' has dtype I32 and shape [7, 64]; GPTQ"},
      {"awq_qwen2_g32", none, [](RawFile& r) {
         RawTensor& t = r[kQ + ".qweight"];
         t.shape = {64, 4};
         t.bytes.resize(64 * 4 * 4);
       }, "tensor 'model.layers.0.self_attn.q_proj.qweight' has dtype I32 and shape [64, 4]; AWQ"},
      {"gptq_llama_g32_act", none, [](RawFile& r) { r.erase(kQ + ".qzeros"); },
       "missing tensor 'model.layers.0.self_attn.q_proj.qzeros'"},
      // g_idx out of range, unbalanced, missing under desc_act, present on AWQ.
      {"gptq_llama_g32_act", none, [&](RawFile& r) { set_i32(r[kQ + ".g_idx"], 5, 2); },
       "tensor 'model.layers.0.self_attn.q_proj.g_idx' has 2 at [5], outside the 2 groups"},
      {"gptq_llama_g32_act", none, [&](RawFile& r) { set_i32(r[kQ + ".g_idx"], 5, -1); },
       "has -1 at [5]"},
      {"gptq_llama_g32_act", none, [&](RawFile& r) {
         RawTensor& t = r[kQ + ".g_idx"];
         int32_t v0;
         std::memcpy(&v0, t.bytes.data(), 4);
         set_i32(t, 0, 1 - v0);
       }, "inputs in group"},
      {"gptq_llama_g32_act", none, [](RawFile& r) { r.erase(kQ + ".g_idx"); },
       "missing tensor 'model.layers.0.self_attn.q_proj.g_idx' ([64]) required by desc_act true"},
      {"awq_qwen2_g32", none, [](RawFile& r) { r[kQ + ".g_idx"] = {"I32", {64}, std::string(256, '\0')}; },
       "tensor 'model.layers.0.self_attn.q_proj.g_idx' is not part of"},
      // sym with a zero point other than 8 (a v2 file read as v1 would show 9).
      {"gptq_qwen2_g128_sym", [](json& q) { q["checkpoint_format"] = "gptq_v2"; }, keep,
       "tensor 'model.layers.0.self_attn.q_proj.qzeros' has zero point 7"},
      // Unknown version / format.
      {"awq_qwen2_g32", [](json& q) { q["version"] = "gemv_fast"; }, keep, "version is \"gemv_fast\""},
      {"gptq_llama_g32_act", [](json& q) { q["checkpoint_format"] = "bitblas"; }, keep,
       "checkpoint_format is \"bitblas\""},
      // A dense weight next to the packed one; a projection stored neither way.
      {"gptq_llama_g32_act", none, [](RawFile& r) { r[kQ + ".weight"] = {"BF16", {64, 64}, std::string(64 * 64 * 2, '\0')}; },
       "tensor 'model.layers.0.self_attn.q_proj.weight' is a dense weight"},
      {"gptq_llama_g32_act", none, [](RawFile& r) { r.erase(kQ + ".qweight"); },
       "missing tensor 'model.layers.0.self_attn.q_proj.weight'"},
      {"gptq_llama_g32_act", [](json& q) { q["lm_head"] = true; }, keep, "quantization_config.lm_head is true"},
  };
  for (const Case& c : cases) {
    const std::string err = LoadError(EditedCopy(c.model, c.config, c.tensors));
    if (std::string(c.message).empty()) {
      EXPECT_EQ(err, "");
    } else {
      EXPECT_NE(err.find(c.message), std::string::npos) << "want '" << c.message << "'\n got '" << err << "'";
    }
  }
}

}  // namespace
}  // namespace loom
