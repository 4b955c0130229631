// ModelConfig: the typed, validated form of a Hugging Face config.json (Llama family).
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "base/status.h"
#include "ops/rope.h"
#include "tensor/dtype.h"

namespace loom {

// Per-layer facts: the attention window (Qwen2/3, Gemma 2/3) and which RoPE (Gemma 3's
// sliding layers use their own theta).
struct LayerConfig {
  int sliding_window = 0;  // 0 = full causal attention; W = attend to the last W positions
  bool local_rope = false;  // RoPE from ModelConfig::rope_local instead of ModelConfig::rope
  bool moe = false;        // the MLP is a mixture of experts (ModelConfig::moe)
};

// Mixture of experts (Qwen3-MoE, Mixtral; see model/arch/moe.h): a router picks `top_k` of
// `num_experts` gated MLPs per row. Module names follow the checkpoint.
struct MoeConfig {
  int num_experts = 0;
  int top_k = 0;             // num_experts_per_tok
  int expert_ffn_dim = 0;    // Qwen3-MoE moe_intermediate_size; Mixtral intermediate_size
  bool norm_topk = false;    // renormalise the top-k probabilities to sum to 1
  std::string block = "mlp";                                   // "block_sparse_moe" (Mixtral)
  std::string gate = "gate_proj", up = "up_proj", down = "down_proj";  // Mixtral: w1, w3, w2
};

// The MLP's gate activation (config.json hidden_act; Gemma's hidden_activation).
enum class Activation { kSilu, kGeluTanh, kGeluErf };  // silu, gelu_pytorch_tanh, gelu

struct ModelConfig {
  std::string architecture;  // HF "architectures"[0], e.g. "Qwen2ForCausalLM"
  std::string model_type;
  int vocab_size = 0;
  int model_dim = 0;     // hidden_size
  int ffn_dim = 0;       // intermediate_size
  int num_layers = 0;
  int num_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  int max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;
  RopeConfig rope;
  bool tie_word_embeddings = false;
  bool qkv_bias = false;  // Qwen2; Llama/Mistral via attention_bias
  bool o_bias = false;    // Llama attention_bias also adds an o_proj bias
  bool mlp_bias = false;
  bool qk_norm = false;   // Qwen3: RMSNorm over head_dim on q and k before RoPE
  Activation activation = Activation::kSilu;
  // Gemma 2/3 (0 = off unless noted):
  bool sandwich_norm = false;    // RMSNorm also on the attention and MLP outputs (4 per layer)
  float embed_scale = 0;         // embeddings × this, rounded to the embedding dtype
  float attn_scale = 0;          // score scale; 0 = head_dim^-0.5
  float attn_softcap = 0;        // scores → tanh(s / cap) · cap
  float final_softcap = 0;       // logits → tanh(l / cap) · cap
  RopeConfig rope_local;         // for layers with local_rope
  bool fused_qkv = false;      // Phi-3: one self_attn.qkv_proj [q_dim + 2·kv_dim, hidden]
  bool fused_gate_up = false;  // Phi-3: one mlp.gate_up_proj [2·ffn, hidden], gate rows first
  MoeConfig moe;          // used by layers with LayerConfig::moe
  std::vector<LayerConfig> layers;
  int bos_token_id = -1;
  std::vector<int> eos_token_ids;
  DType dtype = DType::kBF16;  // the checkpoint's declared torch dtype (informational)
};

// Parses config.json text (and, when non-empty, generation_config.json text for eos/bos).
// `where` names the file in errors. Unknown architectures list the supported ones.
StatusOr<ModelConfig> ParseModelConfig(const std::string& config_json,
                                       const std::string& generation_config_json,
                                       const std::string& where);

// Reads DIR/config.json and DIR/generation_config.json (optional).
StatusOr<ModelConfig> LoadModelConfig(const std::string& dir);

// Upper bounds of config.json sizes: several times the largest published models, small enough
// that no product of them overflows the int64 arithmetic of shapes and buffer sizes.
inline constexpr int kMaxConfigLayers = 1024;               // num_hidden_layers
inline constexpr int kMaxConfigModelDim = 1 << 17;          // hidden_size
inline constexpr int kMaxConfigFfnDim = 1 << 19;            // intermediate_size
inline constexpr int kMaxConfigVocab = 1 << 22;             // vocab_size
inline constexpr int kMaxConfigHeads = 1024;                // num_attention_heads, kv heads
inline constexpr int kMaxConfigHeadDim = 2048;              // head_dim
inline constexpr int kMaxConfigPositions = 1 << 26;         // max_position_embeddings
inline constexpr int kMaxConfigExperts = 4096;              // num_experts / num_local_experts
inline constexpr int kMaxConfigExpertLayers = 1 << 16;      // num_hidden_layers × num_experts

// Helpers for architecture files: read a field with a type and range check (via base/json.h);
// errors name the field and `where`. Absent or null optional fields leave *out unchanged.
Status ReadInt(const nlohmann::json& j, const char* key, int* out, bool required,
               const std::string& where, int64_t min = INT32_MIN, int64_t max = INT32_MAX);
// Finite numbers only.
Status ReadDouble(const nlohmann::json& j, const char* key, double* out, bool required,
                  const std::string& where, double min = -1e300, double max = 1e300);
Status ReadBool(const nlohmann::json& j, const char* key, bool* out, const std::string& where);
// One RoPE parameter object {"rope_type"|"type", "rope_theta", "factor", ...} into *rope
// (fields it lacks keep their value). `at` names the object in errors.
// `config`/`max_positions`: the whole config.json and its max_position_embeddings, which
// longrope reads too (null where the parameters stand alone, e.g. Gemma 3's local rope).
Status ParseRopeParameters(const nlohmann::json& params, const std::string& at, RopeConfig* rope,
                           const nlohmann::json* config = nullptr, int max_positions = 0);
// The RoPE parameter object transformers 5 reads from a config.json (`rope_scaling or
// rope_parameters`: the legacy field wins where it is a non-empty object) and its name in *field;
// null when neither is given. kInvalidArgument when the chosen field is not an object.
StatusOr<const nlohmann::json*> RopeParametersField(const nlohmann::json& j,
                                                    const std::string& where, std::string* field);
// The MLP activation named by `name` (silu, gelu_pytorch_tanh); errors name `field`.
Status ParseActivation(const std::string& name, const std::string& field, const std::string& where,
                       Activation* out);

}  // namespace loom
