// `loom quantize`: writes a compressed-tensors checkpoint (int-quantized W8A8 or pack-quantized W4A16) from loom's own load-time quantization.
#pragma once

#include <cstdint>
#include <string>

#include "base/status.h"
#include "model/model.h"

namespace loom {

struct QuantizeCheckpointOptions {
  // kInt8: format int-quantized, weights int8 per channel (symmetric, f32 `weight_scale`
  // [out, 1]), input activations int8 dynamic per token (W8A8). kInt4: format pack-quantized,
  // weights int4 in groups of `group` (`weight_packed` I32 [out, in/8], f16 `weight_scale`
  // [out, in/group], `weight_shape` I64 [2]), no activation quantization in the file (W4A16).
  LoadOptions::Quantization scheme = LoadOptions::Quantization::kInt8;
  int group = 128;           // kInt4: 32 or 128
  bool quantize_head = false;  // lm_head too (else it is in `ignore` and copied dense)
  uint64_t max_shard_bytes = 2ull << 30;
};

// What `loom quantize` refuses before loading anything: a folder whose config.json already has
// a quantization_config (any quant_method), a scheme other than int8/int4, an int4 group other
// than 32 or 128. The error names the file, the field or the flag. (Mixture-of-experts models are
// written with their experts quantized and their routers dense, in `ignore`; an int4 projection
// that --group-size does not divide takes the group --quantize gives it, Int4GroupFor, in a
// config group of its own, or stays dense in `ignore` where no group of 32 fits.)
Status CheckQuantizeInput(const std::string& model_dir, const QuantizeCheckpointOptions& options);

// Loads `model_dir` quantized exactly as `--quantize` does (LoadOptions with the same scheme,
// group and head flag) and writes `out_dir` as a compressed-tensors checkpoint holding those
// quantized values: serving it gives the same bits as `--quantize` on `model_dir`. Tensors that
// are not quantized are copied as they are, config.json gets a quantization_config (on a tied
// model with the head quantized, tie_word_embeddings becomes false and lm_head is written
// quantized), the other files are copied. Atomic, as `loom merge`: --out checked against the
// input (never it, nor inside it), written into a temporary folder renamed at the end.
// Departures from --scheme/--group-size (other int4 groups, projections left dense) are said on
// stderr by the load (Model::Quantize), in the same terms.
// `departures` (may be null) gets them in short ("g64 on 19, dense on 2"), or "".
Status WriteQuantizedCheckpoint(const std::string& model_dir,
                                const QuantizeCheckpointOptions& options,
                                const std::string& out_dir, bool check_weights = true,
                                std::string* departures = nullptr);

}  // namespace loom
