// Shared Llama-family config.json parsing; architecture files add what differs.
#include "model/config.h"

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

// rope_scaling (transformers 4.x) or rope_parameters (5.x): {"rope_type"|"type": ..., ...}.
Status ParseRope(const json& j, const std::string& where, RopeConfig* rope) {
  RETURN_IF_ERROR(ReadDouble(j, "rope_theta", &rope->theta, false, where));
  RETURN_IF_ERROR(CheckRope(*rope, where));
  const json* params = nullptr;
  std::string field;
  for (const char* key : {"rope_parameters", "rope_scaling"}) {
    auto it = j.find(key);
    if (it != j.end() && !it->is_null()) {
      if (!it->is_object()) return InvalidArgument(where + ": '" + key + "' must be an object");
      params = &*it;
      field = key;
      break;
    }
  }
  if (!params) return OkStatus();
  return ParseRopeParameters(*params, where + ": " + field, rope);
}

}  // namespace

Status ParseRopeParameters(const json& params, const std::string& at, RopeConfig* rope) {
  RETURN_IF_ERROR(ReadDouble(params, "rope_theta", &rope->theta, false, at));
  RETURN_IF_ERROR(CheckRope(*rope, at));
  std::string type = "default";
  for (const char* key : {"rope_type", "type"}) {
    auto it = params.find(key);
    if (it != params.end() && it->is_string()) {
      type = it->get<std::string>();
      break;
    }
  }
  if (type == "default") return OkStatus();
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
  } else {
    return InvalidArgument(at + ": rope type '" + type +
                           "' is not supported (supported: default, linear, llama3)");
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
  } else {
    return InvalidArgument(where + ": " + field + " '" + name +
                           "' is not supported (supported: silu, gelu_pytorch_tanh)");
  }
  return OkStatus();
}

namespace {

// eos_token_id may be an int or a list of ints.
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
    for (const auto& v : *it) {
      if (!v.is_number_integer()) {
        return InvalidArgument(where + ": eos_token_id entries must be integers");
      }
      RETURN_IF_ERROR(add(v));
    }
  } else {
    return InvalidArgument(where + ": eos_token_id must be an integer or a list");
  }
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
  if (c.head_dim == 0) {
    if (c.model_dim % c.num_heads != 0) {
      return InvalidArgument(where + ": hidden_size is not a multiple of num_attention_heads and "
                                     "no head_dim is given");
    }
    c.head_dim = c.model_dim / c.num_heads;
  }
  if (c.head_dim <= 0 || c.head_dim % 2 != 0) {
    return InvalidArgument(where + ": head_dim must be positive and even, got " +
                           std::to_string(c.head_dim));
  }
  if (auto act = j.find("hidden_act"); act != j.end() && act->is_string()) {
    RETURN_IF_ERROR(ParseActivation(act->get<std::string>(), "hidden_act", where, &c.activation));
  }
  for (const char* key : {"torch_dtype", "dtype"}) {
    auto it = j.find(key);
    if (it == j.end() || !it->is_string()) continue;
    if (*it == "float32") c.dtype = DType::kF32;
    if (*it == "float16") c.dtype = DType::kF16;
    if (*it == "bfloat16") c.dtype = DType::kBF16;
  }
  RETURN_IF_ERROR(ParseRope(j, where, &c.rope));
  c.layers.assign(static_cast<size_t>(c.num_layers), LayerConfig{});
  RETURN_IF_ERROR(arch->configure(j, where, &c));

  if (!generation_config_json.empty()) {
    const std::string gwhere = where + " (generation_config.json)";
    ASSIGN_OR_RETURN(json g, ParseJson(generation_config_json, gwhere));
    if (!g.is_object()) {
      return InvalidArgument(where + ": generation_config.json is not a valid JSON object");
    }
    RETURN_IF_ERROR(ReadInt(g, "bos_token_id", &c.bos_token_id, false, gwhere));
    RETURN_IF_ERROR(ReadEos(g, gwhere, &c.eos_token_ids));
  }
  for (int id : c.eos_token_ids) {
    if (id < 0 || id >= c.vocab_size) {
      return InvalidArgument(where + ": eos_token_id " + std::to_string(id) +
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
