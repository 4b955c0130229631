// Pre-quantized compressed-tensors checkpoints: config.json's quantization_config validated, the scheme of each projection, and its tensors read into loom's int8/int4 weights.
#pragma once

#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <unordered_set>
#include <vector>

#include "base/regex.h"
#include "base/status.h"
#include "io/safetensors.h"
#include "model/linear.h"

namespace loom {

// One config group of a compressed-tensors quantization_config that loom serves.
struct CtScheme {
  enum class Kind {
    kInt8Channel,  // format int-quantized (or naive-quantized): int8 `weight` [out, in],
                   // per-channel symmetric `weight_scale` [out, 1] → Int8Weight (W8A8)
    kInt4Group,    // format pack-quantized: 4-bit symmetric, `weight_packed` int32
                   // [out, in/8] (8 nibbles per word, element i at bits 4·(i%8), as q + 8),
                   // `weight_scale` [out, in/group], `weight_shape` [2] → Int4Weight (W4A8)
  };
  std::string group_name;  // the config_groups key, for errors
  Kind kind = Kind::kInt8Channel;
  int group_size = 0;      // kInt4Group: 32, 64 or 128
};

// The validated quantization_config. Thread-safety: immutable after parse.
class CtConfig {
 public:
  // Parses config.json's "quantization_config" (`qc`, an object; `where` names the file). Every
  // field is either handled exactly or rejected naming the field and its value.
  static StatusOr<CtConfig> Parse(const nlohmann::json& qc, const std::string& where);
  // Reads `dir`/config.json: nullopt when it has no quantization_config.
  static StatusOr<std::optional<CtConfig>> Load(const std::string& dir);

  // The scheme of module `name` (an HF module path), as compressed-tensors matches it: `ignore`
  // first (exact names, "re:" prefix-anchored regexes, the class "Linear"); then targets, exact
  // names before regexes (in sorted order) before the class name. Null: the module is dense.
  const CtScheme* Find(const std::string& name) const;
  // Errors for targets that name nothing loom can quantize: a class other than "Linear", or an
  // exact module name that is none of `linear_names` (the model's projections).
  Status CheckTargets(const std::vector<std::string>& linear_names) const;
  const std::string& where() const { return where_; }

 private:
  struct Target {
    std::string text;  // as in the file ("Linear", "re:...", or a module name)
    std::optional<Regex> regex;
    int scheme = 0;    // index into schemes_
  };
  static bool Matches(const Target& t, const std::string& name);
  std::vector<CtScheme> schemes_;
  std::map<std::string, int> target_names_;  // exact module names → scheme (they come first)
  std::vector<Target> targets_;  // regexes, then "Linear": compressed-tensors' priority order
  std::unordered_set<std::string> ignore_names_;  // exact module names
  std::vector<Target> ignore_;                    // regexes and "Linear"
  std::string where_;
};

// Reads the compressed tensors of projection `lin` (its name set; shape [out, in]) with
// `scheme` from `store` into lin->int8 or lin->int4, checking every tensor's dtype and shape
// against the scheme and the model; the names read are added to `consumed`. lin->weight becomes
// a shape-only view (data null): there is no dense weight to merge into or to take a DoRA norm of.
// `bytes` (if not null) grows by the quantized weight's size.
Status LoadCtLinear(const SafetensorsStore& store, const CtScheme& scheme, int64_t out, int64_t in,
                    Linear* lin, std::set<std::string>* consumed, uint64_t* bytes);

}  // namespace loom
