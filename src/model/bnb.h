// Pre-quantized bitsandbytes checkpoints as transformers saves them — 4-bit (NF4, QLoRA's base,
// and FP4) and 8-bit (LLM.int8): quantization_config validated, each projection's tensors read
// into an Nf4Weight or an Int8Weight.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "base/regex.h"
#include "base/status.h"
#include "cpu/nf4_cpu.h"
#include "io/safetensors.h"
#include "model/linear.h"

namespace loom {

// The validated quantization_config of a bitsandbytes checkpoint (quant_method "bitsandbytes").
// Thread-safety: immutable after parse.
struct BnbConfig {
  int bits = 4;                              // 4 (load_in_4bit) or 8 (load_in_8bit: LLM.int8)
  float threshold = 6.0f;                    // llm_int8_threshold (8-bit: outliers ≥ it exact)
  cpu::Bnb4Type type = cpu::Bnb4Type::kNf4;  // bnb_4bit_quant_type
  bool double_quant = false;              // bnb_4bit_use_double_quant
  std::vector<std::string> skip_modules;  // llm_int8_skip_modules (kept dense by transformers)
  std::vector<Regex> skip_patterns;       // each as transformers 5 matches it (see Skipped)
  std::string where;                      // "<dir>/config.json", for errors

  // Parses config.json's "quantization_config" (`qc`, an object). Every field is handled or
  // rejected naming the field.
  static StatusOr<BnbConfig> Parse(const nlohmann::json& qc, const std::string& where);
  // Reads `dir`/config.json: nullopt when it has no quantization_config or its quant_method is
  // not "bitsandbytes" (another reader's).
  static StatusOr<std::optional<BnbConfig>> Load(const std::string& dir);

  // Whether transformers would have kept module `name` dense: some llm_int8_skip_modules key
  // matches it as transformers 5's should_convert_module does — re.match("(?:key)" + a module
  // boundary) from the start ("layers.1" matches "layers.1.mlp", not "layers.11.mlp"), or the
  // name ends with the key ("lm_head", "q_proj").
  bool Skipped(const std::string& name) const;
};

// Whether `store` holds bitsandbytes quantization tensors for projection `name` (a 4-bit
// quant_state or absmax, an 8-bit SCB).
bool HasBnbQuantState(const SafetensorsStore& store, const std::string& name);

// Reads the 4-bit tensors of projection `lin` (its name set; shape [out, in]) into lin->nf4:
// `weight` U8 [(out·in)/2, 1] (two code indices per byte, the first in the high nibble),
// `weight.absmax` (F32 [blocks], or with double quant U8 [blocks] + `weight.nested_absmax` F32
// [⌈blocks/256⌉] + `weight.nested_quant_map` F32 [256] + the JSON's nested_offset),
// `weight.quant_map` F32 [16] (must be the config's code: NF4 or FP4) and
// `weight.quant_state.bitsandbytes__<nf4|fp4>` (U8 JSON: quant_type, blocksize, dtype, shape,
// nested_*), every field checked against the config and the model; names read are added to `consumed`. lin->weight becomes a shape-only view
// (data null). `bytes` (if not null) grows by the weight's size.
// With config.bits 8 the 8-bit tensors instead (LoadBnb8Linear).
Status LoadBnbLinear(const SafetensorsStore& store, const BnbConfig& config, int64_t out,
                     int64_t in, Linear* lin, std::set<std::string>* consumed, uint64_t* bytes);

// LLM.int8: `weight` I8 [out, in] (bitsandbytes' CB), `SCB` F32 [out] (each row's absmax, finite,
// ≥ 0) and `weight_format` U8 [] (0: row-major, the only layout bitsandbytes still writes) into
// lin->int8 marked llm_int8 (scale = SCB, W[j, i] = CB[j, i] · SCB[j] · (1/127) as bitsandbytes'
// int8_vectorwise_dequant) with the config's outlier threshold.
Status LoadBnb8Linear(const SafetensorsStore& store, const BnbConfig& config, int64_t out,
                      int64_t in, Linear* lin, std::set<std::string>* consumed, uint64_t* bytes);

}  // namespace loom
