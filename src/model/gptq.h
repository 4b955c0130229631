// Pre-quantized GPTQ and AWQ (GEMM) checkpoints as on the hub: quantization_config validated (every field handled or rejected by name) and each projection's qweight/qzeros/scales(/g_idx) read into loom's asymmetric Int4Weight.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "base/status.h"
#include "io/safetensors.h"
#include "model/config.h"
#include "model/linear.h"

namespace loom {

// The validated quantization_config of a GPTQ or AWQ checkpoint. Thread-safety: immutable.
struct GptqConfig {
  enum class Method { kGptq, kAwq };
  Method method = Method::kGptq;
  int group_size = 128;  // inputs per scale/zero; -1 (GPTQ only): one group per output channel
  bool sym = true;       // GPTQ sym (every zero point 8, checked); AWQ: zero_point false
  bool desc_act = false;  // GPTQ act order: g_idx required (it is honoured whenever present)
  bool v2 = false;        // GPTQ checkpoint_format "gptq_v2": zero points stored as they are
  bool lm_head = false;   // GPTQ (gptqmodel) lm_head: the head is quantized too
  std::string where;      // config.json path, for errors

  // Parses config.json's "quantization_config" (an object, quant_method "gptq" or "awq").
  static StatusOr<GptqConfig> Parse(const nlohmann::json& qc, const std::string& where);
  // Reads `dir`/config.json: nullopt unless it has a quantization_config whose quant_method is
  // "gptq" or "awq" (compressed-tensors and others go elsewhere).
  static StatusOr<std::optional<GptqConfig>> Load(const std::string& dir);
  // "GPTQ" / "AWQ", with the scheme ("GPTQ 4-bit group 128 asym act-order v1").
  std::string Name() const;
};

// What the config may not ask of this model: a quantized head tied to the embedding, lm_head
// quantized in the files but not in the config (or the reverse). (Experts load one by one, as
// any projection.)
Status CheckGptqModel(const ModelConfig& model, const SafetensorsStore& store, const GptqConfig& quant);

// True when projection `name` is stored quantized (`name`.qweight exists).
bool IsGptqLinear(const SafetensorsStore& store, const std::string& name);

// Reads projection `lin` (its name set; shape [out, in]) from its GPTQ or AWQ tensors into
// lin->int4 (asymmetric, with act-order permutation when g_idx asks), checking every tensor's
// dtype, shape and values; the names read join `consumed`. lin->weight becomes a shape-only
// view (data null): merges and DoRA norms read the dequantized rows. `bytes` grows by the size.
Status LoadGptqLinear(const SafetensorsStore& store, const GptqConfig& quant, int64_t out,
                      int64_t in, Linear* lin, std::set<std::string>* consumed, uint64_t* bytes);

// The unpacked codes of one projection, in file order, before any layout change (tests, tools):
// u [out, in] 0..15, zero [out, groups] 0..16 (GPTQ v1's offset applied), scale [out, groups] f32,
// group_of [in] (GPTQ g_idx, or i / group_size).
struct GptqCodes {
  std::vector<uint8_t> u, zero;
  std::vector<float> scale;
  std::vector<int32_t> group_of;
  int64_t groups = 0, group = 0;
};
StatusOr<GptqCodes> UnpackGptqLinear(const SafetensorsStore& store, const GptqConfig& quant,
                                     const std::string& name, int64_t out, int64_t in,
                                     std::set<std::string>* consumed);

}  // namespace loom
