// Merging an adapter into base weights: W' = W + scale·B·A (DoRA: g ⊙ (W + scale·B·A)), in f32.
#pragma once

#include <functional>
#include <string>

#include "base/status.h"
#include "lora/adapter.h"
#include "tensor/tensor.h"

namespace loom {

// Computes the merged weight of one projection into `out` ([out, in] of base.dtype), one
// row at a time in f32 and rounded once to the weight dtype (round to nearest even). `out` may
// be base.data (each row is read whole before it is written).
void MergeLinearWeight(const Tensor& base, const LoraWeights& lw, void* out);

// Merged embedding table: E'[t] = E[t] + scale · B · A[:, t] (DoRA: then ⊙ gain); out: [vocab, d]
// of base.dtype.
void MergeEmbedding(const Tensor& base, const LoraEmbedding& e, void* out);

}  // namespace loom
