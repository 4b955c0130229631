// bitsandbytes quantization_config (transformers' BitsAndBytesConfig.to_dict): parse and validate,
// every field handled or rejected by name.
#include "model/bnb.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "base/file.h"
#include "base/json.h"

namespace loom {

namespace {
using nlohmann::json;
std::string Show(const json& v) { return JsonToString(v, -1, 80); }
}  // namespace

StatusOr<BnbConfig> BnbConfig::Parse(const json& qc, const std::string& where) {
  const std::string what = where + ": quantization_config";
  if (!qc.is_object()) return InvalidArgument(what + " is " + Show(qc) + ", not an object");
  static const char* const kKnown[] = {"quant_method",
                                       "load_in_4bit",
                                       "load_in_8bit",
                                       "_load_in_4bit",
                                       "_load_in_8bit",
                                       "bnb_4bit_quant_type",
                                       "bnb_4bit_use_double_quant",
                                       "bnb_4bit_compute_dtype",
                                       "bnb_4bit_quant_storage",
                                       "llm_int8_skip_modules",
                                       "llm_int8_threshold",
                                       "llm_int8_has_fp16_weight",
                                       "llm_int8_enable_fp32_cpu_offload"};
  for (auto it = qc.begin(); it != qc.end(); ++it) {
    if (std::none_of(std::begin(kKnown), std::end(kKnown),
                     [&](const char* k) { return it.key() == k; })) {
      return InvalidArgument(what + ": field '" + KeyForMessage(it.key()) + "' (" + Show(it.value()) +
                             ") is not one loom knows how to serve; a bitsandbytes checkpoint that "
                             "needs it is not supported");
    }
  }
  std::string method;
  RETURN_IF_ERROR(GetString(qc, "quant_method", what, &method));
  if (method != "bitsandbytes") {
    return InvalidArgument(what + ": quant_method '" + method + "' is not \"bitsandbytes\"");
  }
  // load_in_8bit (LLM.int8) or load_in_4bit (NF4/FP4); transformers writes both flags and the
  // private copies it keeps in sync.
  bool in8 = false, in8_private = false, in4 = false, in4_private = false;
  RETURN_IF_ERROR(GetOptionalBool(qc, "load_in_8bit", what, &in8));
  RETURN_IF_ERROR(GetOptionalBool(qc, "_load_in_8bit", what, &in8_private));
  RETURN_IF_ERROR(GetOptionalBool(qc, "load_in_4bit", what, &in4));
  RETURN_IF_ERROR(GetOptionalBool(qc, "_load_in_4bit", what, &in4_private));
  if (qc.contains("_load_in_8bit") && in8 != in8_private) {
    return InvalidArgument(what + ": load_in_8bit and _load_in_8bit disagree");
  }
  if (qc.contains("_load_in_4bit") && in4 != in4_private) {
    return InvalidArgument(what + ": load_in_4bit and _load_in_4bit disagree");
  }
  if (in8 == in4) {
    return InvalidArgument(what + (in8 ? ": load_in_4bit and load_in_8bit are both true"
                                       : ": neither load_in_4bit nor load_in_8bit is true") +
                           "; loom reads bitsandbytes 4-bit (NF4, FP4) or 8-bit (LLM.int8) "
                           "checkpoints");
  }
  std::string type = "fp4";  // BitsAndBytesConfig's default
  RETURN_IF_ERROR(GetOptionalString(qc, "bnb_4bit_quant_type", what, &type));
  if (type != "nf4" && type != "fp4") {
    return InvalidArgument(what + ": bnb_4bit_quant_type is '" + type +
                           "'; bitsandbytes 4-bit types are \"nf4\" and \"fp4\"");
  }
  BnbConfig c;
  c.where = where;
  c.type = type == "fp4" ? cpu::Bnb4Type::kFp4 : cpu::Bnb4Type::kNf4;
  c.bits = in8 ? 8 : 4;
  RETURN_IF_ERROR(GetOptionalBool(qc, "bnb_4bit_use_double_quant", what, &c.double_quant));
  // The dtype of the activations and dequantized weights in bitsandbytes' matmul; loom computes in
  // f32 (the "float32" result; bf16/f16 differ from it by their own rounding).
  std::string compute = "float32";
  RETURN_IF_ERROR(GetOptionalString(qc, "bnb_4bit_compute_dtype", what, &compute));
  if (compute != "float32" && compute != "bfloat16" && compute != "float16") {
    return InvalidArgument(what + ": bnb_4bit_compute_dtype '" + compute +
                           "' is not float32, bfloat16 or float16");
  }
  std::string storage = "uint8";
  RETURN_IF_ERROR(GetOptionalString(qc, "bnb_4bit_quant_storage", what, &storage));
  if (storage != "uint8") {
    return InvalidArgument(what + ": bnb_4bit_quant_storage is '" + storage +
                           "'; loom reads packed weights stored as uint8 only");
  }
  if (qc.contains("llm_int8_skip_modules") && !qc["llm_int8_skip_modules"].is_null()) {
    const json& s = qc["llm_int8_skip_modules"];
    if (!s.is_array() || s.size() > 4096) {
      return InvalidArgument(what + ": llm_int8_skip_modules is " + Show(s) +
                             ", not a list of names");
    }
    for (const json& m : s) {
      if (!m.is_string() || m.get<std::string>().empty()) {
        return InvalidArgument(what + ": llm_int8_skip_modules has " + Show(m) +
                               ", not a module name");
      }
      c.skip_modules.push_back(m.get<std::string>());
      ASSIGN_OR_RETURN(Regex r,
                       Regex::Compile("(?:" + c.skip_modules.back() + R"()(?:(?<=\.)|(?=\.|$)))",
                                      what + ".llm_int8_skip_modules"));
      c.skip_patterns.push_back(std::move(r));
    }
  }
  // LLM.int8: the outlier threshold (elements at or above it are multiplied exactly, the rest in
  // int8); fp16 master weights mean the file holds no int8 weights. For 4-bit weights both are
  // ignored by bitsandbytes. fp32 CPU offload keeps some modules dense, which the checkpoint
  // itself shows (no quant_state / SCB).
  double threshold = 6.0;
  RETURN_IF_ERROR(GetOptionalFloat(qc, "llm_int8_threshold", what, &threshold, 0.0, 65504.0));
  c.threshold = static_cast<float>(threshold);
  bool fp16_weights = false, ignored = false;
  RETURN_IF_ERROR(GetOptionalBool(qc, "llm_int8_has_fp16_weight", what, &fp16_weights));
  if (c.bits == 8 && fp16_weights) {
    return InvalidArgument(what + ": llm_int8_has_fp16_weight is true (fp16 master weights, a "
                           "training setup); loom reads 8-bit checkpoints with int8 weights");
  }
  RETURN_IF_ERROR(GetOptionalBool(qc, "llm_int8_enable_fp32_cpu_offload", what, &ignored));
  return c;
}

StatusOr<std::optional<BnbConfig>> BnbConfig::Load(const std::string& dir) {
  const std::string path = dir + "/config.json";
  ASSIGN_OR_RETURN(std::string text, ReadFileBounded(path, kMaxConfigFileBytes));
  ASSIGN_OR_RETURN(json j, ParseJson(text, path));
  if (!j.is_object() || !j.contains("quantization_config") ||
      !j["quantization_config"].is_object()) {
    return std::optional<BnbConfig>();
  }
  const json& qc = j["quantization_config"];
  if (!qc.contains("quant_method") || qc["quant_method"] != json("bitsandbytes")) {
    return std::optional<BnbConfig>();
  }
  ASSIGN_OR_RETURN(BnbConfig c, Parse(qc, path));
  return std::optional<BnbConfig>(std::move(c));
}

bool BnbConfig::Skipped(const std::string& name) const {
  for (size_t i = 0; i < skip_modules.size(); ++i) {
    if (name.ends_with(skip_modules[i]) || skip_patterns[i].PrefixMatch(name)) return true;
  }
  return false;
}

}  // namespace loom
