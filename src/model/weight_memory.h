// `loom inspect`: the scheme (bf16, int8 per channel, int4 g128, compressed-tensors W8A8/W4A16, ...) and the memory of every weight of a loaded model.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "model/model.h"

namespace loom {

struct WeightMemory {
  std::string name;            // a projection's module path ("model.layers.0.self_attn.q_proj"),
                               // or another tensor's name ("model.norm.weight")
  std::string scheme;          // "BF16", "F32", "int8 per-channel", "int4 g128",
                               // "compressed-tensors W8A8 (int8 per-channel)", "compressed-tensors
                               // W4A16 (int4 g32)", "tied to model.embed_tokens.weight"
  std::vector<int64_t> shape;  // [out, in] for projections
  uint64_t bytes = 0;          // what loom holds for it: quantized bytes (scales included) for a
                               // quantized projection, the file's bytes otherwise; 0 when tied
};

// Every projection (as loom serves it, after --quantize) and every other tensor of the files,
// in file order; the tensors a quantized projection was read from are not listed apart.
std::vector<WeightMemory> DescribeWeightMemory(const Model& model);

// Bytes and tensor count per scheme, plus "total".
std::map<std::string, std::pair<int64_t, uint64_t>> SumWeightMemory(const std::vector<WeightMemory>& w);

}  // namespace loom
