// bitsandbytes 4-bit (NF4, FP4) checkpoints: quantization_config fields handled or refused by name
// (LLM.int8, unknown types), and every corrupt tensor or quant_state a clear error naming it
// (nothing loads).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "model/bnb.h"
#include "checkpoint_edit_util.h"
#include "model/model.h"

namespace loom {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const std::string kModels = std::string(LOOM_FIXTURES) + "/models/";

using testutil::LoadError;
using testutil::RawFile;
using testutil::RawTensor;

std::string EditedCopy(const std::string& name, const std::function<void(json&)>& edit_config,
                       const std::function<void(RawFile&)>& edit_tensors) {
  return testutil::EditedCheckpointCopy(kModels, "bnb_corrupt_", name, edit_config, edit_tensors);
}

const std::string kQ = "model.layers.0.self_attn.q_proj.weight";
const std::string kQs = kQ + ".quant_state.bitsandbytes__nf4";
const std::string kQsFp4 = kQ + ".quant_state.bitsandbytes__fp4";

// Rewrites q_proj's packed quant_state JSON.
std::function<void(RawFile&)> EditQuantState(const std::function<void(json&)>& edit) {
  return [edit](RawFile& r) {
    RawTensor& t = r[kQs];
    json j = json::parse(t.bytes);
    edit(j);
    t.bytes = j.dump();
    t.shape = {static_cast<int64_t>(t.bytes.size())};
  };
}

TEST(BnbConfig, HandlesOrRefusesEveryFieldByName) {
  auto parse = [](const std::function<void(json&)>& edit) {
    json qc = {{"quant_method", "bitsandbytes"},
               {"load_in_4bit", true},
               {"load_in_8bit", false},
               {"_load_in_4bit", true},
               {"_load_in_8bit", false},
               {"bnb_4bit_quant_type", "nf4"},
               {"bnb_4bit_use_double_quant", true},
               {"bnb_4bit_compute_dtype", "bfloat16"},
               {"bnb_4bit_quant_storage", "uint8"},
               {"llm_int8_skip_modules", {"lm_head", "mlp"}},
               {"llm_int8_threshold", 6.0},
               {"llm_int8_has_fp16_weight", false},
               {"llm_int8_enable_fp32_cpu_offload", false}};
    edit(qc);
    auto c = BnbConfig::Parse(qc, "config.json");
    return c.ok() ? std::string() : c.status().message();
  };
  EXPECT_EQ(parse([](json&) {}), "");
  struct Case {
    std::function<void(json&)> edit;
    const char* message;
  } cases[] = {
      {[](json& q) { q["bnb_4bit_quant_type"] = "int4"; },
       "bnb_4bit_quant_type is 'int4'; bitsandbytes 4-bit types are \"nf4\" and \"fp4\""},
      {[](json& q) { q["load_in_8bit"] = true; }, "load_in_8bit and _load_in_8bit disagree"},
      {[](json& q) {
         q["load_in_8bit"] = q["_load_in_8bit"] = true;
       },
       "load_in_4bit and load_in_8bit are both true"},
      {[](json& q) {
         q["load_in_4bit"] = q["_load_in_4bit"] = false;
       },
       "neither load_in_4bit nor load_in_8bit is true"},
      {[](json& q) {
         q["load_in_4bit"] = q["_load_in_4bit"] = false;
         q["load_in_8bit"] = q["_load_in_8bit"] = true;
         q["llm_int8_has_fp16_weight"] = true;
       },
       "llm_int8_has_fp16_weight is true"},
      {[](json& q) { q["llm_int8_threshold"] = -1; }, "llm_int8_threshold"},
      {[](json& q) { q["bnb_4bit_quant_storage"] = "bfloat16"; },
       "bnb_4bit_quant_storage is 'bfloat16'"},
      {[](json& q) { q["bnb_4bit_compute_dtype"] = "int8"; }, "bnb_4bit_compute_dtype 'int8'"},
      {[](json& q) { q["llm_int8_skip_modules"] = "lm_head"; },
       "llm_int8_skip_modules is \"lm_head\", not a list"},
      {[](json& q) { q["bnb_4bit_use_double_quant"] = "yes"; }, "bnb_4bit_use_double_quant"},
      {[](json& q) { q["sparsity"] = 1; }, "field 'sparsity' (1) is not one loom knows"},
      // A key of 100,000 bytes is quoted by its first 40 (non-ASCII bytes escaped).
      {[](json& q) { q["\xc3\xa9" + std::string(100000, 'k')] = 1; },
       "field '\\xc3\\xa9kkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkk...' (1) is not one loom knows"},
  };
  for (const Case& c : cases) {
    const std::string err = parse(c.edit);
    EXPECT_NE(err.find(c.message), std::string::npos) << "got: " << err.substr(0, 300) << "\nwant: " << c.message;
    EXPECT_LT(err.size(), 1000u);
  }
  // The type: nf4, fp4, and fp4 when absent (BitsAndBytesConfig's default).
  for (const char* type : {"nf4", "fp4", ""}) {
    json qc = {{"quant_method", "bitsandbytes"}, {"load_in_4bit", true}};
    if (*type) qc["bnb_4bit_quant_type"] = type;
    auto parsed = BnbConfig::Parse(qc, "config.json");
    ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
    EXPECT_STREQ(cpu::Bnb4TypeName(parsed->type), *type ? type : "fp4");
  }
  auto c = BnbConfig::Parse(
      json{{"quant_method", "bitsandbytes"},
           {"load_in_4bit", true},
           {"bnb_4bit_quant_type", "nf4"},
           {"llm_int8_skip_modules",
            {"lm_head", "model.layers.1", "model.layers.2.mlp", "v_proj", "model.*.k_proj"}}},
      "config.json");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  // transformers 5's should_convert_module: a prefix up to a module boundary, a regex with the
  // same boundary, or a suffix.
  EXPECT_TRUE(c->Skipped("lm_head"));
  EXPECT_TRUE(c->Skipped("model.layers.1.self_attn.q_proj"));
  EXPECT_FALSE(c->Skipped("model.layers.11.self_attn.q_proj"));
  EXPECT_TRUE(c->Skipped("model.layers.2.mlp.down_proj"));
  EXPECT_TRUE(c->Skipped("model.layers.0.self_attn.v_proj"));
  EXPECT_TRUE(c->Skipped("model.layers.7.self_attn.k_proj"));
  EXPECT_FALSE(c->Skipped("model.layers.0.mlp.down_proj"));
  EXPECT_FALSE(c->Skipped("model.layers.0.self_attn.q_proj"));
}

TEST(BnbCorrupt, EachMismatchIsAClearErrorNamingTheTensorOrField) {
  auto none = [](json&) {};
  auto keep = [](RawFile&) {};
  struct Case {
    const char* model;
    std::function<void(json&)> config;
    std::function<void(RawFile&)> tensors;
    const char* message;
  } cases[] = {
      {"nf4_llama", none, keep, ""},
      {"nf4dq_qwen2", none, keep, ""},
      {"fp4_qwen3", none, keep, ""},
      {"fp4dq_mistral", none, keep, ""},
      // Wrong blocksize: the absmax no longer has one entry per block.
      {"nf4_llama", none, EditQuantState([](json& j) { j["blocksize"] = 32; }),
       "tensor 'model.layers.0.self_attn.q_proj.weight.absmax' has dtype F32 and shape [64]; "
       "bitsandbytes nf4 (blocksize 32) of model.layers.0.self_attn.q_proj [64, 64] needs F32 "
       "[128]"},
      {"nf4_llama", none, EditQuantState([](json& j) { j["blocksize"] = 128; }),
       "quant_state blocksize 128 does not divide the projection's 64 input features"},
      {"nf4_llama", none, EditQuantState([](json& j) { j["blocksize"] = 48; }),
       "quant_state blocksize 48 does not divide the projection's 64 input features"},
      {"nf4_llama", none, EditQuantState([](json& j) { j["quant_type"] = "fp4"; }),
       "quant_state quant_type is 'fp4', but quantization_config's bnb_4bit_quant_type is 'nf4'"},
      {"nf4_llama", none, EditQuantState([](json& j) {
         j["shape"] = {64, 128};
       }),
       "quant_state shape is [64,128], the model needs [64, 64]"},
      {"nf4_llama", none, EditQuantState([](json& j) { j["dtype"] = "int8"; }),
       "quant_state dtype 'int8'"},
      {"nf4_llama", none, EditQuantState([](json& j) { j["extra"] = 1; }),
       "quant_state field 'extra'"},
      {"nf4dq_qwen2", none, EditQuantState([](json& j) { j["nested_blocksize"] = 128; }),
       "quant_state nested_blocksize is 128; bitsandbytes (and loom) use 256"},
      {"nf4dq_qwen2", none, EditQuantState([](json& j) { j.erase("nested_offset"); }),
       "field 'nested_offset'"},
      {"nf4_llama", none, EditQuantState([](json& j) { j["nested_offset"] = 0.5; }),
       "quant_state has nested (double-quant) fields, but quantization_config's "
       "bnb_4bit_use_double_quant is false"},
      {"nf4_llama", none,
       [](RawFile& r) {
         r[kQs].bytes = "{\"quant_type\": \"nf4\", ";
         r[kQs].shape = {21};
       },
       "tensor 'model.layers.0.self_attn.q_proj.weight.quant_state.bitsandbytes__nf4'"},
      // Tensors of the wrong length or dtype.
      {"nf4_llama", none,
       [](RawFile& r) {
         r[kQ + ".absmax"].shape = {63};
         r[kQ + ".absmax"].bytes.resize(63 * 4);
       },
       "tensor 'model.layers.0.self_attn.q_proj.weight.absmax' has dtype F32 and shape [63]"},
      {"nf4dq_qwen2", none, [](RawFile& r) { r[kQ + ".absmax"].dtype = "I8"; },
       "tensor 'model.layers.0.self_attn.q_proj.weight.absmax' has dtype I8 and shape [64]; "
       "bitsandbytes nf4 (blocksize 64, double quant)"},
      {"nf4dq_qwen2", none, [](RawFile& r) { r.erase(kQ + ".nested_absmax"); },
       "missing tensor 'model.layers.0.self_attn.q_proj.weight.nested_absmax'"},
      {"nf4_llama", none,
       [](RawFile& r) {
         r[kQ].shape = {2047, 1};
         r[kQ].bytes.resize(2047);
       },
       "tensor 'model.layers.0.self_attn.q_proj.weight' has dtype U8 and shape [2047, 1]; "
       "bitsandbytes nf4 (blocksize 64) of model.layers.0.self_attn.q_proj [64, 64] needs U8 "
       "[2048, 1]"},
      {"nf4_llama", none, [](RawFile& r) { r[kQ + ".quant_map"].bytes[0] = 1; },
       "tensor 'model.layers.0.self_attn.q_proj.weight.quant_map' entry 0 is"},
      // An FP4 checkpoint whose quant_map is NF4's.
      {"fp4_qwen3", none,
       [](RawFile& r) {
         std::memcpy(r[kQ + ".quant_map"].bytes.data(), cpu::kNf4Code, 64);
       },
       "tensor 'model.layers.0.self_attn.q_proj.weight.quant_map' entry 0 is -1.000000, not "
       "bitsandbytes' fp4 code value 0.000000"},
      {"nf4_llama", none,
       [](RawFile& r) {
         float nan = std::nanf("");
         std::memcpy(r[kQ + ".absmax"].bytes.data() + 8, &nan, 4);
       },
       "tensor 'model.layers.0.self_attn.q_proj.weight.absmax' ([64] F32) has NaN at index 2"},
      // A negative block absmax (bitsandbytes never writes one: it would flip the block's signs),
      // and a double quant's negative nested_absmax.
      {"nf4_llama", none,
       [](RawFile& r) {
         const float neg = -1.0f;
         std::memcpy(r[kQ + ".absmax"].bytes.data() + 8, &neg, 4);
       },
       "tensor 'model.layers.0.self_attn.q_proj.weight.absmax' entry 2 is -1.000000, not a block "
       "absmax (finite, at least 0)"},
      {"nf4dq_qwen2", none,
       [](RawFile& r) {
         const float neg = -0.5f;
         std::memcpy(r[kQ + ".nested_absmax"].bytes.data(), &neg, 4);
       },
       "tensor 'model.layers.0.self_attn.q_proj.weight.nested_absmax' entry 0 is -0.500000, not a "
       "block absmax (finite, at least 0)"},
      // FP4 tensors in an NF4 checkpoint and the reverse; a quantized module the config keeps
      // dense; a config/file disagreement.
      {"nf4_llama", none,
       [](RawFile& r) {
         r[kQsFp4] = r[kQs];
         r.erase(kQs);
       },
       "tensor 'model.layers.0.self_attn.q_proj.weight.quant_state.bitsandbytes__fp4' holds "
       "bitsandbytes fp4 weights, but quantization_config's bnb_4bit_quant_type is 'nf4'"},
      {"fp4_qwen3", none,
       [](RawFile& r) {
         r[kQs] = r[kQsFp4];
         r.erase(kQsFp4);
       },
       "tensor 'model.layers.0.self_attn.q_proj.weight.quant_state.bitsandbytes__nf4' holds "
       "bitsandbytes nf4 weights, but quantization_config's bnb_4bit_quant_type is 'fp4'"},
      {"nf4_llama",
       [](json& q) {
         q["llm_int8_skip_modules"] = {"lm_head", "model.layers.0.self_attn"};
       },
       keep,
       "quantizes model.layers.0.self_attn.q_proj, which quantization_config's "
       "llm_int8_skip_modules keeps dense"},
      {"nf4_llama", [](json& q) { q["bnb_4bit_use_double_quant"] = true; }, keep,
       "quant_state lacks nested (double-quant) fields, but quantization_config's "
       "bnb_4bit_use_double_quant is true"},
      {"nf4_llama",
       [](json& q) {
         q["load_in_8bit"] = q["_load_in_8bit"] = true;
         q["load_in_4bit"] = q["_load_in_4bit"] = false;
       },
       keep, "model.layers.0.self_attn.q_proj.SCB' (the row scales of a bitsandbytes 8-bit weight)"},
      // LLM.int8 tensors.
      {"int8_llama", none, keep, ""},
      {"int8t0_qwen2", none, keep, ""},
      {"int8_llama", none, [](RawFile& r) { r["model.layers.0.self_attn.q_proj.SCB"].dtype = "I32"; },
       "tensor 'model.layers.0.self_attn.q_proj.SCB' has dtype I32"},
      {"int8_llama", none,
       [](RawFile& r) {
         float nan = std::nanf("");
         std::memcpy(r["model.layers.0.self_attn.q_proj.SCB"].bytes.data() + 4, &nan, 4);
       },
       "tensor 'model.layers.0.self_attn.q_proj.SCB' ([64] F32) has NaN at index 1"},
      {"int8_llama", none,
       [](RawFile& r) { r["model.layers.0.self_attn.q_proj.weight_format"].bytes[0] = 2; },
       "tensor 'model.layers.0.self_attn.q_proj.weight_format' is 2: a tiled"},
      {"int8_llama", none,
       [](RawFile& r) {
         r[kQ].shape = {64, 32};
         r[kQ].bytes.resize(64 * 32);
       },
       "tensor 'model.layers.0.self_attn.q_proj.weight' has dtype I8 and shape [64, 32]; "
       "bitsandbytes LLM.int8 of model.layers.0.self_attn.q_proj [64, 64] needs I8 [64, 64]"},
      {"int8_llama", none, [](RawFile& r) { r.erase("model.layers.1.mlp.up_proj.SCB"); },
       "model.layers.1.mlp.up_proj.weight"},
      {"nf4_llama", [](json& q) { q["bnb_4bit_quant_type"] = "fp4"; }, keep,
       "holds bitsandbytes nf4 weights, but quantization_config's bnb_4bit_quant_type is 'fp4'"},
      {"fp4dq_mistral", [](json& q) { q.erase("bnb_4bit_quant_type"); }, keep, ""},  // fp4
      // A leftover quant-state tensor of a module that is not quantized.
      {"nf4_llama", none, [](RawFile& r) { r["lm_head.weight.absmax"] = r[kQ + ".absmax"]; },
       "missing tensor 'lm_head.weight.quant_state.bitsandbytes__nf4'"},
  };
  for (const Case& c : cases) {
    const std::string err = LoadError(EditedCopy(c.model, c.config, c.tensors));
    if (std::string(c.message).empty()) {
      EXPECT_EQ(err, "") << c.model;
    } else {
      EXPECT_NE(err.find(c.message), std::string::npos)
          << "got: " << err << "\nwant: " << c.message;
    }
  }
}

}  // namespace
}  // namespace loom
