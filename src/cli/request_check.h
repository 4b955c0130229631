// Request validation shared by the CLI commands (and their fuzz target): sizes checked before
// anything is sized from them, and --batch files parsed into engine requests.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "engine/engine.h"
#include "model/config.h"

namespace loom::cli {

// The sampling parameters' ranges, and prompt + max_tokens within the model's context length
// (int64 arithmetic: max_tokens near INT_MAX cannot wrap).
Status ValidateRequestSize(const ModelConfig& config, const SamplingParams& params,
                           int64_t prompt_len);

// One --batch entry: the request and the "adapter" field as written (echoed in the output).
struct BatchEntry {
  GenerationRequest request;
  nlohmann::json adapter_field;
};

inline constexpr size_t kMaxBatchEntries = 1 << 16;

// Parses a --batch file: [{"prompt_tokens": [ids], "adapter": NAME | null, "max_tokens": N, ...}, ...].
// Besides prompt_tokens and adapter an entry may set "logprobs" and any sampling field the
// server takes (engine/request_fields.h: temperature, top_p, seed, ...), parsed by the same
// code, over `defaults` (the command's flags); any other key is an error naming it.
// Every entry is validated (ids in the vocabulary, max_tokens ≥ 1, prompt + max_tokens within
// the context, adapter among `adapter_slots`) before the caller sizes anything; errors name the
// file (`where`), the entry and the field. *total_tokens gets the sum of prompt + max_tokens.
StatusOr<std::vector<BatchEntry>> ParseBatchRequests(std::string_view text, const std::string& where,
                                                     const ModelConfig& config,
                                                     const std::map<std::string, int>& adapter_slots,
                                                     const SamplingParams& defaults,
                                                     int64_t* total_tokens);

}  // namespace loom::cli
