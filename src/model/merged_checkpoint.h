// `loom merge` output: a standard HF checkpoint with an adapter folded in (model/ is above lora/).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "base/status.h"
#include "io/safetensors.h"
#include "lora/adapter.h"

namespace loom {

class Model;

// The rules for `loom merge --out`, checked before anything is written: the output is a new
// folder or an empty real folder (not a symbolic link), and neither it nor any folder above it
// is the model or the adapter folder (compared resolved, by path and by inode). Returns the
// resolved output path. `adapter_dir` may be empty; `command` names the writer in errors.
StatusOr<std::string> CheckMergeOutput(const std::string& model_dir, const std::string& adapter_dir,
                                       const std::string& out_dir,
                                       const std::string& command = "loom merge");

// Runs `write` on a fresh temporary sibling folder of `out_real` (CheckMergeOutput's result for
// --out `out_dir`) and renames it to `out_real` when it succeeds; on failure the temporary
// folder is removed, so nothing half-written is left. `command` names the writer in errors.
Status WriteCheckpointAtomically(const std::string& out_dir, const std::string& out_real,
                                 const std::string& command,
                                 const std::function<Status(const std::string& tmp)>& write);

// Writes `specs` into `out_dir` as model.safetensors, or as shards of at most max_shard_bytes
// (model-0000i-of-0000n.safetensors) plus model.safetensors.index.json; `fill` produces each
// tensor's bytes (peak memory: one tensor).
Status WriteCheckpointShards(const std::string& out_dir, const std::vector<TensorSpec>& specs,
                             const std::function<Status(const TensorSpec&, void*)>& fill,
                             uint64_t max_shard_bytes);

// Copies every file of `model_dir` except *.safetensors* (config, tokenizer, generation config)
// into `out_dir`; symbolic links only when they resolve inside `model_dir`, sub-folders skipped.
Status CopyCheckpointSideFiles(const std::string& model_dir, const std::string& out_dir);

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
