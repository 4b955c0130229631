// Sampling defaults a model folder recommends (generation_config.json), applied as vLLM's
// `--generation-config` / `--override-generation-config` apply them to requests that set none.
#pragma once

#include <functional>
#include <optional>
#include <string>

#include "base/status.h"
#include "engine/sampler.h"

namespace loom {

struct GenerationDefaults {
  // Used where a request leaves the field unset (absent or null).
  std::optional<float> temperature, top_p, min_p, repetition_penalty;
  std::optional<int> top_k;
  std::optional<int> max_tokens;  // max_new_tokens: a request's max_tokens when it sets none
  std::optional<int>
      max_tokens_cap;  // caps every request's max_tokens (see LoadGenerationDefaults)

  bool empty() const {
    return !temperature && !top_p && !min_p && !repetition_penalty && !top_k && !max_tokens &&
           !max_tokens_cap;
  }
  // "temperature=0.6, top_p=0.9" (the start-up line); "" when empty.
  std::string Describe() const;
  // Fills each sampling field of *params that `given` (a field name → whether the request set
  // it) says the request did not set. max_tokens is the caller's (it depends on the endpoint).
  void Apply(const std::function<bool(const char* field)>& given, SamplingParams* params) const;
};

// vLLM's semantics. `mode`:
//  - "auto": the model folder's generation_config.json, if any;
//  - "vllm": none (loom's own defaults);
//  - a folder: its generation_config.json (required), whose max_new_tokens also caps requests.
// Of the file, the fields vLLM takes (temperature, top_p, top_k, min_p, repetition_penalty,
// max_new_tokens) count only where they differ from transformers' GenerationConfig defaults
// (GenerationConfig.to_diff_dict: temperature 1.0, top_p 1.0, top_k 50, repetition_penalty 1.0
// are no-ops); `override_json` (a JSON object of those fields, or "") is laid over them as given
// (a null removes the file's value), and its max_new_tokens is both chat's default length and
// every request's cap. Every value is range-checked as a request's would be;
// errors name the file or flag and the field.
StatusOr<GenerationDefaults> LoadGenerationDefaults(const std::string& mode,
                                                    const std::string& model_dir,
                                                    const std::string& override_json);

}  // namespace loom
