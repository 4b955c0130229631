// `loom merge` output: a standard HF checkpoint with an adapter folded in (model/ is above lora/).
#pragma once

#include <cstdint>
#include <string>

#include "base/status.h"
#include "lora/adapter.h"

namespace loom {

class Model;

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
Status WriteMergedCheckpoint(const std::string& model_dir, const Model& model,
                             const Adapter& adapter, const std::string& out_dir,
                             uint64_t max_shard_bytes);

}  // namespace loom
