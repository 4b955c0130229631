// Merging an adapter into base weights: W' = W + scale·B·A (DoRA: g ⊙ (W + scale·B·A)), in f32.
#pragma once

#include <functional>
#include <string>

#include "base/status.h"
#include "lora/adapter.h"
#include "tensor/tensor.h"

namespace loom {

// Computes the merged weight of one projection into `out` ([out, in] of base.dtype), one
// row at a time in f32 and rounded once to the weight dtype (round to nearest even).
void MergeLinearWeight(const Tensor& base, const LoraWeights& lw, void* out);

// Merged embedding table: E'[t] = E[t] + scale · B · A[:, t]; out: [vocab, d] of base.dtype.
void MergeEmbedding(const Tensor& base, const LoraEmbedding& e, void* out);

// The rules for `loom merge --out`, checked before anything is written: the output is a new
// folder or an empty real folder (not a symbolic link), and neither it nor any folder above it
// is the model or the adapter folder (compared resolved, by path and by inode). Returns the
// resolved output path.
StatusOr<std::string> CheckMergeOutput(const std::string& model_dir, const std::string& adapter_dir,
                                       const std::string& out_dir);

// `loom merge`: writes DIR_OUT as a standard HF checkpoint (sharded safetensors + index,
// config and tokenizer files copied) with `adapter` folded in, one tensor at a time (peak
// memory above the mmap'd base: one weight). Never touches its inputs: CheckMergeOutput's
// rules, then everything is written into a temporary sibling folder renamed to DIR_OUT at the
// end (removed on failure). Files of the model folder that are symbolic links are copied only
// when they resolve inside the model folder (others are skipped with a warning).
Status WriteMergedCheckpoint(const std::string& model_dir, const class Model& model,
                             const Adapter& adapter, const std::string& out_dir,
                             uint64_t max_shard_bytes);

}  // namespace loom
