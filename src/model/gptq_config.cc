// GPTQ / AWQ quantization_config: parse and validate (every field handled, accepted as calibration-only information, or rejected by name).
#include <algorithm>
#include <utility>
#include <nlohmann/json.hpp>

#include "base/file.h"
#include "base/json.h"
#include "model/gptq.h"

namespace loom {

namespace {

using nlohmann::json;

std::string Show(const json& v) { return JsonToString(v, -1, 80); }

bool Has(const json& qc, const char* k) { return qc.contains(k) && !qc[k].is_null(); }

bool In(const std::string& key, std::initializer_list<const char*> list) {
  return std::any_of(list.begin(), list.end(), [&](const char* k) { return key == k; });
}

// Fields that record how the checkpoint was calibrated or which runtime kernel to pick; the
// stored tensors alone define the weights, so they change nothing loom computes.
constexpr std::initializer_list<const char*> kGptqInformational = {
    "true_sequential", "damp_percent", "damp_auto_increment", "static_groups", "mse", "meta",
    "quantizer", "tokenizer", "dataset", "model_seqlen", "batch_size", "pad_token_id",
    "use_exllama", "exllama_config", "max_input_length", "cache_block_outputs", "use_cuda_fp16",
    "backend", "model_name_or_path", "model_file_base_name", "block_name_to_quantize",
    "module_name_preceding_first_block", "modules_in_block_to_quantize", "act_group_aware",
    "v2", "v2_alpha", "gptaq", "hyb_act", "device", "pack_impl", "offload_to_disk",
    "offload_to_disk_path", "mock_quantization", "damp_percent_auto_increment", "hessian",
    "foem", "fallback"};
constexpr std::initializer_list<const char*> kAwqInformational = {
    "backend", "do_fuse", "fuse_max_seq_len", "modules_to_fuse", "exllama_config", "meta",
    "quantizer", "duo_scaling", "apply_clip", "n_parallel_calib_samples", "max_calib_samples",
    "max_calib_seq_len", "export_compatible", "modules_to_not_convert", "desc_act", "sym"};

Status GetInt4Bits(const json& qc, const std::string& what, const char* key) {
  if (!qc.contains(key)) return InvalidArgument(what + ": '" + key + "' is missing");
  if (qc[key] != json(4)) {
    return InvalidArgument(what + ": " + key + " is " + Show(qc[key]) +
                           "; loom serves 4-bit GPTQ/AWQ only (2-, 3- and 8-bit packings are not read)");
  }
  return OkStatus();
}

Status GetGroup(const json& qc, const std::string& what, const char* key, bool allow_channel, int* out) {
  if (!qc.contains(key) || !qc[key].is_number_integer()) {
    return InvalidArgument(what + ": " + key + " is " + Show(qc.contains(key) ? qc[key] : json()) +
                           "; an integer is required");
  }
  int64_t g = 0;  // through JsonValueToInt: 2^64 − 1 is refused, not wrapped to −1
  RETURN_IF_ERROR(JsonValueToInt(qc[key], key, what, &g));
  if (g == -1 && allow_channel) {
    *out = -1;
    return OkStatus();
  }
  if (g < 32 || g > 8192 || g % 32 != 0) {
    return InvalidArgument(what + ": " + key + " is " + std::to_string(g) + "; loom's int4 kernels "
                           "take groups that are multiples of 32 (32, 64, 128, …)" +
                           (allow_channel ? " or -1 (per channel)" : ""));
  }
  *out = static_cast<int>(g);
  return OkStatus();
}

Status GetBool(const json& qc, const std::string& what, const char* key, bool* out) {
  if (!Has(qc, key)) return OkStatus();
  if (!qc[key].is_boolean()) return InvalidArgument(what + ": " + key + " is " + Show(qc[key]) + ", not a boolean");
  *out = qc[key].get<bool>();
  return OkStatus();
}

Status ParseGptq(const json& qc, const std::string& what, GptqConfig* c) {
  for (auto it = qc.begin(); it != qc.end(); ++it) {
    const std::string& k = it.key();
    if (In(k, {"quant_method", "bits", "group_size", "desc_act", "sym", "checkpoint_format",
               "format", "method", "pack_dtype", "lm_head", "dynamic", "adapter", "rotation",
               "is_marlin_format", "zero_point"}) || In(k, kGptqInformational)) {
      continue;
    }
    return InvalidArgument(what + ": field '" + KeyForMessage(k) + "' (" + Show(it.value()) +
                           ") is not one loom knows how to serve; a GPTQ checkpoint that needs it is not supported");
  }
  RETURN_IF_ERROR(GetInt4Bits(qc, what, "bits"));
  RETURN_IF_ERROR(GetGroup(qc, what, "group_size", /*allow_channel=*/true, &c->group_size));
  RETURN_IF_ERROR(GetBool(qc, what, "desc_act", &c->desc_act));
  RETURN_IF_ERROR(GetBool(qc, what, "sym", &c->sym));
  RETURN_IF_ERROR(GetBool(qc, what, "lm_head", &c->lm_head));
  // checkpoint_format (transformers, gptqmodel) or format (gptqmodel's own config):
  // "gptq" = v1 (zero points stored minus one), "gptq_v2" = as they are.
  // Both given and different: which one a reader takes depends on key order (gptqmodel maps
  // both to one field), and v1 against v2 shifts every zero point by one: refused.
  if (Has(qc, "checkpoint_format") && Has(qc, "format") &&
      qc["checkpoint_format"] != qc["format"]) {
    return InvalidArgument(what + ": checkpoint_format is " + Show(qc["checkpoint_format"]) +
                           " but format is " + Show(qc["format"]) +
                           "; they must agree (v1 and v2 read zero points differently)");
  }
  for (const char* key : {"checkpoint_format", "format"}) {
    if (!Has(qc, key)) continue;
    const json& f = qc[key];
    if (f == json("gptq")) {
      c->v2 = false;
    } else if (f == json("gptq_v2")) {
      c->v2 = true;
    } else {
      return InvalidArgument(what + ": " + key + " is " + Show(f) + "; loom reads \"gptq\" (v1) and "
                             "\"gptq_v2\" checkpoints (marlin, bitblas, qqq, … repacks are not read)");
    }
  }
  if (Has(qc, "method") && qc["method"] != json("gptq")) {
    return InvalidArgument(what + ": method is " + Show(qc["method"]) + "; quant_method gptq needs method \"gptq\"");
  }
  if (Has(qc, "pack_dtype") && qc["pack_dtype"] != json("int32") && qc["pack_dtype"] != json("torch.int32")) {
    return InvalidArgument(what + ": pack_dtype is " + Show(qc["pack_dtype"]) + "; loom reads int32-packed GPTQ only");
  }
  if (Has(qc, "is_marlin_format") && qc["is_marlin_format"] != json(false)) {
    return InvalidArgument(what + ": is_marlin_format is " + Show(qc["is_marlin_format"]) + "; marlin repacks are not read");
  }
  for (const char* key : {"dynamic", "adapter", "rotation"}) {
    if (Has(qc, key) && !(qc[key].is_object() && qc[key].empty()) && qc[key] != json(false)) {
      return InvalidArgument(what + ": " + key + " is " + Show(qc[key]) + "; not supported (per-module "
                             "overrides, built-in adapters and rotations must be null)");
    }
  }
  if (Has(qc, "zero_point")) {
    return InvalidArgument(what + ": zero_point is " + Show(qc["zero_point"]) + "; GPTQ's asymmetry is "
                           "'sym' (zero_point belongs to AWQ)");
  }
  return OkStatus();
}

Status ParseAwq(const json& qc, const std::string& what, GptqConfig* c) {
  for (auto it = qc.begin(); it != qc.end(); ++it) {
    const std::string& k = it.key();
    if (In(k, {"quant_method", "bits", "w_bit", "group_size", "q_group_size", "zero_point",
               "version", "format", "method"}) || In(k, kAwqInformational)) {
      continue;
    }
    return InvalidArgument(what + ": field '" + KeyForMessage(k) + "' (" + Show(it.value()) +
                           ") is not one loom knows how to serve; an AWQ checkpoint that needs it is not supported");
  }
  // AutoAWQ writes w_bit / q_group_size, transformers' AwqConfig bits / group_size; a config
  // with both spellings must say the same thing in each (else which one the packing used is
  // unknown).
  for (const auto& [a, b] : {std::pair<const char*, const char*>{"bits", "w_bit"}, {"group_size", "q_group_size"}}) {
    if (qc.contains(a) && qc.contains(b) && qc[a] != qc[b]) {
      return InvalidArgument(what + ": " + a + " is " + Show(qc[a]) + " but " + b + " is " + Show(qc[b]) +
                             "; the two spellings of one setting must agree");
    }
  }
  RETURN_IF_ERROR(GetInt4Bits(qc, what, qc.contains("bits") ? "bits" : "w_bit"));
  RETURN_IF_ERROR(GetGroup(qc, what, qc.contains("group_size") ? "group_size" : "q_group_size",
                           /*allow_channel=*/false, &c->group_size));
  bool zero_point = true;
  RETURN_IF_ERROR(GetBool(qc, what, "zero_point", &zero_point));
  if (!zero_point) {
    return InvalidArgument(what + ": zero_point is false; AutoAWQ's GEMM packing always stores zero "
                           "points (its pack asserts them), and loom reads only that packing");
  }
  c->sym = false;
  for (const char* key : {"version", "format"}) {
    if (!Has(qc, key)) continue;
    std::string v = qc[key].is_string() ? qc[key].get<std::string>() : Show(qc[key]);
    std::transform(v.begin(), v.end(), v.begin(), [](unsigned char ch) { return std::tolower(ch); });
    if (v != "gemm") {
      return InvalidArgument(what + ": " + key + " is " + Show(qc[key]) + "; loom reads AWQ \"gemm\" "
                             "checkpoints (gemv, gemv_fast, marlin, exllama and ipex packings are not read)");
    }
  }
  if (Has(qc, "method") && qc["method"] != json("awq")) {
    return InvalidArgument(what + ": method is " + Show(qc["method"]) + "; quant_method awq needs method \"awq\"");
  }
  return OkStatus();
}

}  // namespace

StatusOr<GptqConfig> GptqConfig::Parse(const json& qc, const std::string& where) {
  const std::string what = where + ": quantization_config";
  if (!qc.is_object()) return InvalidArgument(what + " is " + Show(qc) + ", not an object");
  std::string method;
  RETURN_IF_ERROR(GetString(qc, "quant_method", what, &method));
  GptqConfig c;
  c.where = where;
  if (method == "gptq") {
    c.method = Method::kGptq;
    RETURN_IF_ERROR(ParseGptq(qc, what, &c));
  } else if (method == "awq") {
    c.method = Method::kAwq;
    RETURN_IF_ERROR(ParseAwq(qc, what, &c));
  } else {
    return InvalidArgument(what + ": quant_method '" + method + "' is neither gptq nor awq");
  }
  return c;
}

StatusOr<std::optional<GptqConfig>> GptqConfig::Load(const std::string& dir) {
  const std::string path = dir + "/config.json";
  ASSIGN_OR_RETURN(std::string text, ReadFileBounded(path, kMaxConfigFileBytes));
  ASSIGN_OR_RETURN(json j, ParseJson(text, path));
  if (!j.is_object() || !j.contains("quantization_config") || !j["quantization_config"].is_object()) {
    return std::optional<GptqConfig>();
  }
  const json& qc = j["quantization_config"];
  if (!qc.contains("quant_method") || (qc["quant_method"] != json("gptq") && qc["quant_method"] != json("awq"))) {
    return std::optional<GptqConfig>();
  }
  ASSIGN_OR_RETURN(GptqConfig c, Parse(qc, path));
  return std::optional<GptqConfig>(std::move(c));
}

std::string GptqConfig::Name() const {
  std::string s = method == Method::kAwq ? "AWQ (gemm)" : "GPTQ";
  s += " 4-bit, group " + (group_size < 0 ? std::string("per channel") : std::to_string(group_size));
  s += sym ? ", sym" : ", asym";
  if (method == Method::kGptq) s += std::string(desc_act ? ", act-order" : "") + (v2 ? ", gptq_v2" : ", v1");
  return s;
}

bool IsGptqLinear(const SafetensorsStore& store, const std::string& name) {
  return store.Find(name + ".qweight") != nullptr;
}

Status CheckGptqModel(const ModelConfig& model, const SafetensorsStore& store, const GptqConfig& quant) {
  const bool head = IsGptqLinear(store, "lm_head");
  if (head && model.tie_word_embeddings) {
    return InvalidArgument(quant.where + ": lm_head.qweight is stored, but lm_head is tied to the embedding");
  }
  if (head != quant.lm_head) {
    return InvalidArgument(quant.where + ": quantization_config.lm_head is " + (quant.lm_head ? "true" : "false") +
                           " but lm_head.qweight is " + (head ? "present" : "absent"));
  }
  return OkStatus();
}

}  // namespace loom
