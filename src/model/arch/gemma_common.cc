// Gemma 2/3 shared config fields, and the weight hook that turns each RMSNorm's (1 + w) into w'.
#include "model/arch/gemma_common.h"

#include <cmath>
#include <nlohmann/json.hpp>
#include <vector>

#include "base/json.h"
#include "model/registry.h"
#include "model/weights.h"

namespace loom {

namespace {

bool Absent(const nlohmann::json& j, const char* key) {
  auto it = j.find(key);
  return it == j.end() || it->is_null();
}

// A soft-capping value: absent → the default, null → off (0), else a positive number.
Status ReadSoftCap(const nlohmann::json& j, const char* key, double default_value,
                   const std::string& where, float* out) {
  auto it = j.find(key);
  if (it == j.end()) {
    *out = static_cast<float>(default_value);
    return OkStatus();
  }
  if (it->is_null()) {
    *out = 0;
    return OkStatus();
  }
  double v = 0;
  RETURN_IF_ERROR(ReadDouble(j, key, &v, true, where, 1e-6, 1e9));
  *out = static_cast<float>(v);
  return OkStatus();
}

Status ReadLayerTypes(const nlohmann::json& j, const std::string& where, int pattern,
                      ModelConfig* c) {
  int window = 4096;  // Gemma2Config / Gemma3TextConfig default
  const bool null_window = j.contains("sliding_window") && j["sliding_window"].is_null();
  RETURN_IF_ERROR(ReadInt(j, "sliding_window", &window, false, where, 1, kMaxConfigPositions));
  std::vector<bool> sliding(c->layers.size());
  auto types = j.find("layer_types");
  if (types != j.end() && !types->is_null()) {
    if (!types->is_array() || types->size() != c->layers.size()) {
      return InvalidArgument(where + ": field 'layer_types' must be a list of " +
                             std::to_string(c->layers.size()) + " entries (one per layer)");
    }
    for (size_t i = 0; i < c->layers.size(); ++i) {
      const auto& t = (*types)[i];
      if (t == "sliding_attention") {
        sliding[i] = true;
      } else if (t != "full_attention") {
        return InvalidArgument(where + ": field 'layer_types' entry " + std::to_string(i) + " " +
                               JsonToString(t, -1, 80) +
                               " is not supported (supported: sliding_attention, full_attention)");
      }
    }
  } else {
    for (size_t i = 0; i < c->layers.size(); ++i) {
      sliding[i] = (static_cast<int>(i) + 1) % pattern != 0;
    }
  }
  for (size_t i = 0; i < c->layers.size(); ++i) {
    if (!sliding[i]) continue;
    if (null_window) {
      return InvalidArgument(where + ": field 'sliding_window' is null but layer " +
                             std::to_string(i) + " is a sliding_attention layer");
    }
    c->layers[i].sliding_window = window;
  }
  return OkStatus();
}

}  // namespace

Status ConfigureGemmaCommon(const nlohmann::json& j, const std::string& where,
                            const GemmaDefaults& defaults, ModelConfig* c) {
  // transformers' dataclass defaults where config.json leaves a field out.
  if (Absent(j, "head_dim")) c->head_dim = 256;
  if (Absent(j, "num_key_value_heads")) c->num_kv_heads = 4;
  if (c->num_heads % c->num_kv_heads != 0) {
    return InvalidArgument(where + ": num_attention_heads (" + std::to_string(c->num_heads) +
                           ") must be a multiple of num_key_value_heads (" +
                           std::to_string(c->num_kv_heads) + ")");
  }
  if (Absent(j, "tie_word_embeddings")) c->tie_word_embeddings = true;
  bool bidirectional = false;
  RETURN_IF_ERROR(ReadBool(j, "use_bidirectional_attention", &bidirectional, where));
  if (bidirectional) {
    return InvalidArgument(where + ": field 'use_bidirectional_attention' = true is not supported "
                                   "(loom runs causal decoders)");
  }
  // Gemma 2/3 read hidden_activation through ACT2FN, so "gelu" is the exact erf GELU (only
  // GemmaConfig, Gemma 1, maps a legacy "gelu" to the tanh form); hidden_act, when present, is
  // ignored, as transformers 5.24 does. A null is refused, as Gemma2Config refuses it.
  std::string act = "gelu_pytorch_tanh";
  if (auto it = j.find("hidden_activation"); it != j.end()) {
    if (!it->is_string()) {
      return InvalidArgument(where + ": field 'hidden_activation' must be a string, got " + JsonToString(*it, -1, 80));
    }
    act = it->get<std::string>();
  }
  RETURN_IF_ERROR(ParseActivation(act, "hidden_activation", where, &c->activation));
  double scalar = 256;
  RETURN_IF_ERROR(ReadDouble(j, "query_pre_attn_scalar", &scalar, false, where, 1e-6, 1e9));
  c->attn_scale = static_cast<float>(std::pow(scalar, -0.5));  // query_pre_attn_scalar**-0.5
  RETURN_IF_ERROR(ReadSoftCap(j, "attn_logit_softcapping", defaults.attn_softcap, where,
                              &c->attn_softcap));
  RETURN_IF_ERROR(ReadSoftCap(j, "final_logit_softcapping", defaults.final_softcap, where,
                              &c->final_softcap));
  bool attention_bias = false;
  RETURN_IF_ERROR(ReadBool(j, "attention_bias", &attention_bias, where));
  c->qkv_bias = attention_bias;
  c->o_bias = attention_bias;
  c->sandwich_norm = true;
  // hidden_size**0.5 as a float32 tensor; Model::Load rounds it to the embedding dtype.
  c->embed_scale = static_cast<float>(std::sqrt(static_cast<double>(c->model_dim)));
  return ReadLayerTypes(j, where, defaults.sliding_window_pattern, c);
}

// Gemma's RMSNorm multiplies by (1.0 + w.float()) in f32: adding 1 once at load gives the same
// f32 factor, so the shared RmsNorm runs unchanged.
Status PrepareGemmaWeights(const ModelConfig& /*config*/, ModelWeights* w) {
  auto plus_one = [](std::vector<float>& v) {
    for (float& x : v) x += 1.0f;
  };
  for (LayerWeights& l : w->layers) {
    for (auto* v : {&l.input_norm, &l.post_norm, &l.attn_out_norm, &l.ffn_out_norm, &l.q_norm,
                    &l.k_norm}) {
      plus_one(*v);
    }
  }
  plus_one(w->final_norm);
  return OkStatus();
}

}  // namespace loom
