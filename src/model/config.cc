// Shared Llama-family config.json parsing; architecture files add what differs.
#include "model/config.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "base/file.h"
#include "base/json.h"
#include "model/registry.h"

namespace loom {

using json = nlohmann::json;

Status ReadInt(const json& j, const char* key, int* out, bool required, const std::string& where,
               int64_t min, int64_t max) {
  return required ? GetInt(j, key, where, out, min, max)
                  : GetOptionalInt(j, key, where, out, min, max);
}

Status ReadDouble(const json& j, const char* key, double* out, bool required,
                  const std::string& where, double min, double max) {
  return required ? GetFloat(j, key, where, out, min, max)
                  : GetOptionalFloat(j, key, where, out, min, max);
}

Status ReadBool(const json& j, const char* key, bool* out, const std::string& where) {
  return GetOptionalBool(j, key, where, out);
}

namespace {

// RoPE frequencies are theta^(-2i/d): theta must be a finite positive number.
Status CheckRope(const RopeConfig& rope, const std::string& where) {
  if (!(rope.theta > 0)) {
    return InvalidArgument(where + ": field 'rope_theta' must be positive, got " +
                           std::to_string(rope.theta));
  }
  return OkStatus();
}

// longrope: short_factor/long_factor lists, the switch length (a top-level
// original_max_position_embeddings wins, as transformers' standardize_rope_params does), and the
// attention factor: given, or sqrt(1 + ln(factor)/ln(original)) with factor = given or
// max_position_embeddings / original (1 when factor ≤ 1). List lengths are checked against the
// rotary dim once the architecture has set it (CheckRopeDims).
Status ParseLongRope(const json& j, const json& params, int max_positions, const std::string& at,
                     RopeConfig* rope) {
  rope->scaling = RopeScaling::kLongRope;
  for (const char* key : {"short_factor", "long_factor"}) {
    auto it = params.find(key);
    if (it == params.end() || !it->is_array() || it->empty() || it->size() > kMaxConfigHeadDim) {
      return InvalidArgument(at + ": field '" + key + "' must be a non-empty list of numbers");
    }
    std::vector<double>& out = key[0] == 's' ? rope->short_factor : rope->long_factor;
    for (const json& v : *it) {
      if (!v.is_number() || !(v.get<double>() > 0) || !std::isfinite(v.get<double>())) {
        return InvalidArgument(at + ": field '" + key + "' entries must be positive numbers");
      }
      out.push_back(v.get<double>());
    }
  }
  int original = max_positions;
  RETURN_IF_ERROR(ReadInt(params, "original_max_position_embeddings", &original, false, at, 1,
                          kMaxConfigPositions));
  RETURN_IF_ERROR(
      ReadInt(j, "original_max_position_embeddings", &original, false, at, 1, kMaxConfigPositions));
  rope->original_max_position = original;
  double factor = static_cast<double>(max_positions) / original;
  RETURN_IF_ERROR(ReadDouble(params, "factor", &factor, false, at, 1e-9, 1e9));
  rope->factor = factor;
  rope->attention_factor =
      factor <= 1.0 ? 1.0
                    : std::sqrt(1.0 + std::log(factor) / std::log(static_cast<double>(original)));
  RETURN_IF_ERROR(
      ReadDouble(params, "attention_factor", &rope->attention_factor, false, at, 0, 1e9));
  return OkStatus();
}

// rope_scaling (transformers 4.x) or rope_parameters (5.x): {"rope_type"|"type": ..., ...}.
Status ParseRope(const json& j, const std::string& where, int max_positions, RopeConfig* rope) {
  RETURN_IF_ERROR(ReadDouble(j, "rope_theta", &rope->theta, false, where));
  RETURN_IF_ERROR(CheckRope(*rope, where));
  std::string field;
  ASSIGN_OR_RETURN(const json* params, RopeParametersField(j, where, &field));
  if (!params) return OkStatus();
  return ParseRopeParameters(*params, where + ": " + field, rope, &j, max_positions);
}

}  // namespace

StatusOr<const json*> RopeParametersField(const json& j, const std::string& where,
                                          std::string* field) {
  // transformers 5 (RotaryEmbeddingConfigMixin): rope_parameters = rope_scaling or
  // rope_parameters, so a non-empty rope_scaling wins where a file carries both.
  // Python's `or`: null, false, 0, "", [] and {} are all "not given".
  const auto falsy = [](const json& v) {
    return v.is_null() || (v.is_boolean() && !v.get<bool>()) ||
           (v.is_number() && v.get<double>() == 0.0) ||
           (v.is_string() && v.get_ref<const std::string&>().empty()) ||
           (v.is_structured() && v.empty());
  };
  const auto scaling = j.find("rope_scaling");
  const bool use_scaling = scaling != j.end() && !falsy(*scaling);
  const char* key = use_scaling ? "rope_scaling" : "rope_parameters";
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return static_cast<const json*>(nullptr);
  if (!it->is_object()) return InvalidArgument(where + ": '" + key + "' must be an object");
  *field = key;
  return &*it;
}

Status ParseRopeParameters(const json& params, const std::string& at, RopeConfig* rope,
                           const json* config, int max_positions) {
  RETURN_IF_ERROR(ReadDouble(params, "rope_theta", &rope->theta, false, at));
  RETURN_IF_ERROR(CheckRope(*rope, at));
  std::string type = "default";
  for (const char* key : {"rope_type", "type"}) {
    auto it = params.find(key);
    if (it == params.end() || it->is_null()) continue;
    // A number or a list here was read as absent: plain RoPE where the file asked for scaling
    // (transformers refuses it: no RoPE type of that name).
    if (!it->is_string()) return InvalidArgument(at + "." + key + ": must be a string");
    type = it->get<std::string>();
    break;
  }
  if (type == "default") return CheckRope(*rope, at);
  // Phi-3's config maps a "yarn" type to longrope (Phi3Config.convert_rope_params_to_dict).
  if (type == "yarn" && config && config->is_object() && config->contains("model_type") &&
      (*config)["model_type"] == "phi3") {
    type = "longrope";
  }
  if (type == "linear") {
    rope->scaling = RopeScaling::kLinear;
    RETURN_IF_ERROR(ReadDouble(params, "factor", &rope->factor, true, at));
  } else if (type == "llama3") {
    rope->scaling = RopeScaling::kLlama3;
    RETURN_IF_ERROR(ReadDouble(params, "factor", &rope->factor, true, at));
    RETURN_IF_ERROR(ReadDouble(params, "low_freq_factor", &rope->low_freq_factor, true, at));
    RETURN_IF_ERROR(ReadDouble(params, "high_freq_factor", &rope->high_freq_factor, true, at));
    RETURN_IF_ERROR(ReadInt(params, "original_max_position_embeddings",
                            &rope->original_max_position, true, at));
    if (rope->high_freq_factor <= rope->low_freq_factor) {
      return InvalidArgument(at + ": high_freq_factor must exceed low_freq_factor");
    }
  } else if ((type == "longrope" || type == "su") && config) {  // "su": longrope's old name
    RETURN_IF_ERROR(ParseLongRope(*config, params, max_positions, at, rope));
  } else {
    return InvalidArgument(at + ": rope type '" + type +
                           "' is not supported (supported: default, linear, llama3, longrope)");
  }
  if (!(rope->factor > 0)) return InvalidArgument(at + ": factor must be positive");
  if (rope->scaling == RopeScaling::kLlama3 && rope->original_max_position <= 0) {
    return InvalidArgument(at + ": original_max_position_embeddings must be positive");
  }
  return CheckRope(*rope, at);
}

Status ParseActivation(const std::string& name, const std::string& field, const std::string& where,
                       Activation* out) {
  if (name == "silu") {
    *out = Activation::kSilu;
  } else if (name == "gelu_pytorch_tanh") {
    *out = Activation::kGeluTanh;
  } else if (name == "gelu") {  // transformers' ACT2FN["gelu"]: the exact (erf) GELU
    *out = Activation::kGeluErf;
  } else {
    return InvalidArgument(where + ": " + field + " '" + name +
                           "' is not supported (supported: silu, gelu, gelu_pytorch_tanh)");
  }
  return OkStatus();
}

// The rotary dim (set by the architecture for partial rotary) fits the head; longrope's factor
// lists have one entry per rotated pair.
Status CheckRopeDims(const ModelConfig& c, const std::string& where) {
  const int dim = RopeDim(c.rope, c.head_dim);
  if (dim <= 0 || dim > c.head_dim || dim % 2 != 0) {
    return InvalidArgument(where + ": rotary dim " + std::to_string(dim) +
                           " (partial_rotary_factor × head_dim) must be even and in (0, head_dim]");
  }
  if (c.rope.scaling != RopeScaling::kLongRope) return OkStatus();
  for (const auto* f : {&c.rope.short_factor, &c.rope.long_factor}) {
    if (f->size() != static_cast<size_t>(dim / 2)) {
      return InvalidArgument(where + ": rope " +
                             (f == &c.rope.short_factor ? "short_factor" : "long_factor") +
                             " has " + std::to_string(f->size()) + " entries, the rotary dim " +
                             std::to_string(dim) + " needs " + std::to_string(dim / 2));
    }
  }
  return OkStatus();
}

namespace {

constexpr size_t kMaxEosIds = 1024;

// eos_token_id may be an int or a list of ints (sorted, duplicates dropped).
Status ReadEos(const json& j, const std::string& where, std::vector<int>* out) {
  auto it = j.find("eos_token_id");
  if (it == j.end() || it->is_null()) return OkStatus();
  std::vector<int> ids;
  // An id beyond int must not wrap around into the vocabulary.
  auto add = [&](const json& v) {
    const bool fits = v.is_number_unsigned()
                          ? v.get<uint64_t>() <= INT32_MAX
                          : (v.get<int64_t>() >= INT32_MIN && v.get<int64_t>() <= INT32_MAX);
    if (!fits) {
      return InvalidArgument(where + ": eos_token_id " + JsonToString(v, -1, 80) + " is outside the vocabulary");
    }
    ids.push_back(static_cast<int>(v.get<int64_t>()));
    return OkStatus();
  };
  if (it->is_number_integer()) {
    RETURN_IF_ERROR(add(*it));
  } else if (it->is_array()) {
    // Each generated token is compared with every id: 4M ids slowed decoding 30× (real
    // models list 1-3).
    if (it->size() > kMaxEosIds) {
      return InvalidArgument(where + ": eos_token_id lists " + std::to_string(it->size()) +
                             " ids, more than " + std::to_string(kMaxEosIds));
    }
    for (const auto& v : *it) {
      if (!v.is_number_integer()) {
        return InvalidArgument(where + ": eos_token_id entries must be integers");
      }
      RETURN_IF_ERROR(add(v));
    }
  } else {
    return InvalidArgument(where + ": eos_token_id must be an integer or a list");
  }
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  *out = std::move(ids);
  return OkStatus();
}

}  // namespace

StatusOr<ModelConfig> ParseModelConfig(const std::string& config_json,
                                       const std::string& generation_config_json,
                                       const std::string& where) {
  ASSIGN_OR_RETURN(json j, ParseJson(config_json, where));
  if (!j.is_object()) return InvalidArgument(where + ": not a valid JSON object");
  ModelConfig c;
  auto archs = j.find("architectures");
  if (archs == j.end() || !archs->is_array() || archs->empty() || !(*archs)[0].is_string()) {
    return InvalidArgument(where + ": missing 'architectures' (supported: " +
                           SupportedArchitectureList() + ")");
  }
  c.architecture = (*archs)[0].get<std::string>();
  const ArchEntry* arch = FindArchitecture(c.architecture);
  if (!arch) {
    return InvalidArgument(where + ": architecture '" + c.architecture +
                           "' is not supported (supported: " + SupportedArchitectureList() + ")");
  }
  if (auto mt = j.find("model_type"); mt != j.end() && mt->is_string()) c.model_type = *mt;
  // Sizes are capped before anything is allocated from them (layers, KV cache, scratch).
  RETURN_IF_ERROR(ReadInt(j, "vocab_size", &c.vocab_size, true, where, 1, kMaxConfigVocab));
  RETURN_IF_ERROR(ReadInt(j, "hidden_size", &c.model_dim, true, where, 1, kMaxConfigModelDim));
  RETURN_IF_ERROR(ReadInt(j, "intermediate_size", &c.ffn_dim, true, where, 1, kMaxConfigFfnDim));
  RETURN_IF_ERROR(ReadInt(j, "num_hidden_layers", &c.num_layers, true, where, 1, kMaxConfigLayers));
  RETURN_IF_ERROR(ReadInt(j, "num_attention_heads", &c.num_heads, true, where, 1, kMaxConfigHeads));
  c.num_kv_heads = c.num_heads;
  RETURN_IF_ERROR(
      ReadInt(j, "num_key_value_heads", &c.num_kv_heads, false, where, 1, kMaxConfigHeads));
  c.max_position_embeddings = 4096;
  RETURN_IF_ERROR(ReadInt(j, "max_position_embeddings", &c.max_position_embeddings, false, where,
                          1, kMaxConfigPositions));
  RETURN_IF_ERROR(ReadDouble(j, "rms_norm_eps", &c.rms_norm_eps, false, where));
  // RMSNorm divides by sqrt(mean(x²) + eps): eps must be positive (and small).
  if (!(c.rms_norm_eps > 0) || c.rms_norm_eps >= 1) {
    return InvalidArgument(where + ": field 'rms_norm_eps' must be in (0, 1), got " +
                           std::to_string(c.rms_norm_eps));
  }
  RETURN_IF_ERROR(ReadBool(j, "tie_word_embeddings", &c.tie_word_embeddings, where));
  RETURN_IF_ERROR(ReadInt(j, "bos_token_id", &c.bos_token_id, false, where));
  RETURN_IF_ERROR(ReadEos(j, where, &c.eos_token_ids));
  if (c.num_heads % c.num_kv_heads != 0) {
    return InvalidArgument(where + ": num_attention_heads (" + std::to_string(c.num_heads) +
                           ") must be a multiple of num_key_value_heads (" +
                           std::to_string(c.num_kv_heads) + ")");
  }
  c.head_dim = 0;
  RETURN_IF_ERROR(ReadInt(j, "head_dim", &c.head_dim, false, where, 0, kMaxConfigHeadDim));
  // Absent: hidden_size / num_attention_heads, unless the architecture has its own default
  // (Gemma 2/3: 256, set by its configure below; a Gemma config whose hidden_size is not a
  // multiple of its heads was refused here, which transformers loads).
  const bool head_dim_given = c.head_dim != 0;
  if (!head_dim_given && c.model_dim % c.num_heads == 0) c.head_dim = c.model_dim / c.num_heads;
  if (auto act = j.find("hidden_act"); arch->reads_hidden_act && act != j.end() && !act->is_null()) {
    if (!act->is_string()) return InvalidArgument(where + ": hidden_act must be a string");
    RETURN_IF_ERROR(ParseActivation(act->get<std::string>(), "hidden_act", where, &c.activation));
  }
  for (const char* key : {"torch_dtype", "dtype"}) {
    auto it = j.find(key);
    if (it == j.end() || !it->is_string()) continue;
    if (*it == "float32") c.dtype = DType::kF32;
    if (*it == "float16") c.dtype = DType::kF16;
    if (*it == "bfloat16") c.dtype = DType::kBF16;
  }
  RETURN_IF_ERROR(ParseRope(j, where, c.max_position_embeddings, &c.rope));
  c.layers.assign(static_cast<size_t>(c.num_layers), LayerConfig{});
  RETURN_IF_ERROR(arch->configure(j, where, &c));
  if (c.head_dim == 0 && !head_dim_given) {
    return InvalidArgument(where + ": hidden_size is not a multiple of num_attention_heads and "
                                   "no head_dim is given");
  }
  if (c.head_dim <= 0 || c.head_dim % 2 != 0) {
    return InvalidArgument(where + ": head_dim must be positive and even, got " +
                           std::to_string(c.head_dim));
  }
  RETURN_IF_ERROR(CheckRopeDims(c, where));

  // The file whose eos_token_id is used names an out-of-vocabulary one (review finding: one
  // from generation_config.json was reported against config.json).
  std::string eos_where = where;
  if (!generation_config_json.empty()) {
    const std::string gwhere = where + " (generation_config.json)";
    ASSIGN_OR_RETURN(json g, ParseJson(generation_config_json, gwhere));
    if (!g.is_object()) {
      return InvalidArgument(where + ": generation_config.json is not a valid JSON object");
    }
    RETURN_IF_ERROR(ReadInt(g, "bos_token_id", &c.bos_token_id, false, gwhere));
    const std::vector<int> before = c.eos_token_ids;
    RETURN_IF_ERROR(ReadEos(g, gwhere, &c.eos_token_ids));
    if (c.eos_token_ids != before) eos_where = gwhere;
  }
  for (int id : c.eos_token_ids) {
    if (id < 0 || id >= c.vocab_size) {
      return InvalidArgument(eos_where + ": eos_token_id " + std::to_string(id) +
                             " is outside the vocabulary");
    }
  }
  return c;
}

StatusOr<ModelConfig> LoadModelConfig(const std::string& dir) {
  const std::string path = dir + "/config.json";
  ASSIGN_OR_RETURN(std::string text, ReadFileBounded(path, kMaxConfigFileBytes));
  std::string gen;
  const std::string gen_path = dir + "/generation_config.json";
  ASSIGN_OR_RETURN(const bool has_gen, RegularFileExists(gen_path));
  if (has_gen) {
    ASSIGN_OR_RETURN(gen, ReadFileBounded(gen_path, kMaxConfigFileBytes));
  }
  return ParseModelConfig(text, gen, path);
}

}  // namespace loom
