// CLI pieces for adapters: --lora NAME=DIR parsing, `loom inspect`, `loom merge`, --batch runs.
#pragma once

#include <CLI/CLI.hpp>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "engine/engine.h"
#include "lora/adapter.h"

namespace loom::cli {

RunFn AddInspectCommand(CLI::App& app);
RunFn AddMergeCommand(CLI::App& app);

// A --lora value: "NAME=DIR" or "DIR". It is split at its first '=' unless what comes before
// holds a '/' or the whole value is an existing path, so "sweep/lr=2e-4" is a folder (it loaded
// ./2e-4 as adapter "sweep/lr"); a bad NAME is still read as one (and refused by name). `name`
// is empty for a plain DIR. serve, generate, chat, inspect, merge, perplexity and bench alike.
struct LoraSpec {
  std::string name;
  std::string dir;
};
LoraSpec SplitLoraSpec(const std::string& spec);
// SplitLoraSpec(spec).dir ("" for "").
std::string LoraFolder(const std::string& spec);
// A folder's own name, "." and ".." resolved ("./" in the adapter folder is its name, not "."):
// the default name of an adapter given as a path, and of the served model.
std::string FolderName(const std::string& path);
// The spec's name and folder, or an error naming the spec: "=DIR" (no name before '=') and
// "NAME=" (no folder after it), where no such path exists.
StatusOr<LoraSpec> ParseLoraNameAndDir(const std::string& spec);

// "NAME=DIR" or "DIR" (name = the folder's name) → loaded adapters, in order. `notes`: each
// adapter's NoteAdapterConfig on stderr (inspect reports those itself).
StatusOr<std::vector<std::shared_ptr<const Adapter>>> LoadCliAdapters(
    const Model& model, const std::vector<std::string>& specs, int max_rank,
    bool check_weights = true, bool notes = true);

// --batch FILE.json: [{"prompt_tokens": [ids], "adapter": NAME | null, "max_tokens": N}, ...]
// run together as one continuous batch; prints a JSON list of per-entry results.
int RunBatchFile(Model* model, const std::vector<std::shared_ptr<const Adapter>>& adapters,
                 const std::string& batch_path, const SamplingParams& params);

// One generation result as the JSON object `loom generate --output json` prints.
nlohmann::json ResultJson(const GenerationResult& r, int logprobs);

}  // namespace loom::cli
