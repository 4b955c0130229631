// Shared Llama-family config.json parsing; architecture files add what differs.
#include "model/config.h"

#include <filesystem>
#include <nlohmann/json.hpp>

#include "base/mmap_file.h"
#include "model/registry.h"

namespace loom {

using json = nlohmann::json;

Status ReadInt(const json& j, const char* key, int* out, bool required, const std::string& where) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    if (required) return InvalidArgument(where + ": missing required field '" + key + "'");
    return OkStatus();
  }
  if (!it->is_number_integer()) {
    return InvalidArgument(where + ": field '" + key + "' must be an integer, got " + it->dump());
  }
  int64_t v = it->get<int64_t>();
  if (v < INT32_MIN || v > INT32_MAX) {
    return InvalidArgument(where + ": field '" + key + "' is out of range: " + it->dump());
  }
  *out = static_cast<int>(v);
  return OkStatus();
}

Status ReadDouble(const json& j, const char* key, double* out, bool required,
                  const std::string& where) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    if (required) return InvalidArgument(where + ": missing required field '" + key + "'");
    return OkStatus();
  }
  if (!it->is_number()) {
    return InvalidArgument(where + ": field '" + key + "' must be a number, got " + it->dump());
  }
  *out = it->get<double>();
  return OkStatus();
}

Status ReadBool(const json& j, const char* key, bool* out, const std::string& where) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return OkStatus();
  if (!it->is_boolean()) {
    return InvalidArgument(where + ": field '" + key + "' must be true or false, got " +
                           it->dump());
  }
  *out = it->get<bool>();
  return OkStatus();
}

namespace {

// rope_scaling (transformers 4.x) or rope_parameters (5.x): {"rope_type"|"type": ..., ...}.
Status ParseRope(const json& j, const std::string& where, RopeConfig* rope) {
  RETURN_IF_ERROR(ReadDouble(j, "rope_theta", &rope->theta, false, where));
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
  const std::string at = where + ": " + field;
  RETURN_IF_ERROR(ReadDouble(*params, "rope_theta", &rope->theta, false, at));
  std::string type = "default";
  for (const char* key : {"rope_type", "type"}) {
    auto it = params->find(key);
    if (it != params->end() && it->is_string()) {
      type = it->get<std::string>();
      break;
    }
  }
  if (type == "default") return OkStatus();
  if (type == "linear") {
    rope->scaling = RopeScaling::kLinear;
    RETURN_IF_ERROR(ReadDouble(*params, "factor", &rope->factor, true, at));
  } else if (type == "llama3") {
    rope->scaling = RopeScaling::kLlama3;
    RETURN_IF_ERROR(ReadDouble(*params, "factor", &rope->factor, true, at));
    RETURN_IF_ERROR(ReadDouble(*params, "low_freq_factor", &rope->low_freq_factor, true, at));
    RETURN_IF_ERROR(ReadDouble(*params, "high_freq_factor", &rope->high_freq_factor, true, at));
    RETURN_IF_ERROR(ReadInt(*params, "original_max_position_embeddings",
                            &rope->original_max_position, true, at));
    if (rope->high_freq_factor <= rope->low_freq_factor) {
      return InvalidArgument(at + ": high_freq_factor must exceed low_freq_factor");
    }
  } else {
    return InvalidArgument(at + ": rope type '" + type +
                           "' is not supported (supported: default, linear, llama3)");
  }
  if (!(rope->factor > 0)) return InvalidArgument(at + ": factor must be positive");
  return OkStatus();
}

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
      return InvalidArgument(where + ": eos_token_id " + v.dump() + " is outside the vocabulary");
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
  json j = json::parse(config_json, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    return InvalidArgument(where + ": not a valid JSON object");
  }
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
  RETURN_IF_ERROR(ReadInt(j, "vocab_size", &c.vocab_size, true, where));
  RETURN_IF_ERROR(ReadInt(j, "hidden_size", &c.model_dim, true, where));
  RETURN_IF_ERROR(ReadInt(j, "intermediate_size", &c.ffn_dim, true, where));
  RETURN_IF_ERROR(ReadInt(j, "num_hidden_layers", &c.num_layers, true, where));
  RETURN_IF_ERROR(ReadInt(j, "num_attention_heads", &c.num_heads, true, where));
  c.num_kv_heads = c.num_heads;
  RETURN_IF_ERROR(ReadInt(j, "num_key_value_heads", &c.num_kv_heads, false, where));
  c.max_position_embeddings = 4096;
  RETURN_IF_ERROR(ReadInt(j, "max_position_embeddings", &c.max_position_embeddings, false, where));
  RETURN_IF_ERROR(ReadDouble(j, "rms_norm_eps", &c.rms_norm_eps, false, where));
  RETURN_IF_ERROR(ReadBool(j, "tie_word_embeddings", &c.tie_word_embeddings, where));
  RETURN_IF_ERROR(ReadInt(j, "bos_token_id", &c.bos_token_id, false, where));
  RETURN_IF_ERROR(ReadEos(j, where, &c.eos_token_ids));
  for (const char* key : {"num_hidden_layers", "hidden_size", "intermediate_size", "vocab_size",
                          "num_attention_heads", "num_key_value_heads"}) {
    auto it = j.find(key);
    if (it != j.end() && it->is_number_integer() && it->get<int64_t>() <= 0) {
      return InvalidArgument(where + ": field '" + key + "' must be positive, got " + it->dump());
    }
  }
  if (c.num_heads % c.num_kv_heads != 0) {
    return InvalidArgument(where + ": num_attention_heads (" + std::to_string(c.num_heads) +
                           ") must be a multiple of num_key_value_heads (" +
                           std::to_string(c.num_kv_heads) + ")");
  }
  c.head_dim = 0;
  RETURN_IF_ERROR(ReadInt(j, "head_dim", &c.head_dim, false, where));
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
  if (auto act = j.find("hidden_act"); act != j.end() && act->is_string() && *act != "silu") {
    return InvalidArgument(where + ": hidden_act '" + act->get<std::string>() +
                           "' is not supported (supported: silu)");
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
    json g = json::parse(generation_config_json, nullptr, false);
    if (g.is_discarded() || !g.is_object()) {
      return InvalidArgument(where + ": generation_config.json is not a valid JSON object");
    }
    const std::string gwhere = where + " (generation_config.json)";
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
  namespace fs = std::filesystem;
  const std::string path = (fs::path(dir) / "config.json").string();
  ASSIGN_OR_RETURN(std::string text, ReadTextFile(path));
  std::string gen;
  const std::string gen_path = (fs::path(dir) / "generation_config.json").string();
  if (fs::exists(gen_path)) {
    ASSIGN_OR_RETURN(gen, ReadTextFile(gen_path));
  }
  return ParseModelConfig(text, gen, path);
}

}  // namespace loom
