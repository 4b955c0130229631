// ValidateRequestSize and the --batch file parser.
#include "cli/request_check.h"

#include "base/json.h"

namespace loom::cli {

using json = nlohmann::json;

Status ValidateRequestSize(const ModelConfig& config, const SamplingParams& params,
                           int64_t prompt_len) {
  RETURN_IF_ERROR(params.Validate(config.vocab_size));
  const int64_t total = prompt_len + int64_t{params.max_tokens};
  if (total > config.max_position_embeddings) {
    return InvalidArgument("prompt (" + std::to_string(prompt_len) + " tokens) + max_tokens (" +
                           std::to_string(params.max_tokens) +
                           ") exceeds the maximum context length " +
                           std::to_string(config.max_position_embeddings));
  }
  return OkStatus();
}

StatusOr<std::vector<BatchEntry>> ParseBatchRequests(std::string_view text, const std::string& where,
                                                     const ModelConfig& config,
                                                     const std::map<std::string, int>& adapter_slots,
                                                     const SamplingParams& defaults,
                                                     int64_t* total_tokens) {
  ASSIGN_OR_RETURN(json entries, ParseJson(text, where));
  if (!entries.is_array() || entries.empty()) {
    return InvalidArgument(where + ": expected a non-empty JSON list");
  }
  if (entries.size() > kMaxBatchEntries) {
    return InvalidArgument(where + ": " + std::to_string(entries.size()) +
                           " entries, above the maximum " + std::to_string(kMaxBatchEntries));
  }
  std::vector<BatchEntry> out;
  int64_t total = 0;
  for (size_t i = 0; i < entries.size(); ++i) {
    const json& e = entries[i];
    const std::string at = where + " entry " + std::to_string(i);
    BatchEntry entry;
    GenerationRequest& r = entry.request;
    r.params = defaults;
    if (!e.is_object()) {
      return InvalidArgument(at + ": needs {\"prompt_tokens\": [ids], ...}, got " +
                             JsonToString(e, -1, 60));
    }
    RETURN_IF_ERROR(GetIntList(e, "prompt_tokens", at, &r.prompt, 0, config.vocab_size - 1));
    RETURN_IF_ERROR(GetOptionalInt(e, "max_tokens", at, &r.params.max_tokens, 1, INT32_MAX));
    if (r.prompt.empty()) return InvalidArgument(at + ": prompt_tokens is empty");
    Status st = ValidateRequestSize(config, r.params, static_cast<int64_t>(r.prompt.size()));
    if (!st.ok()) return Status(st.code(), at + ": " + st.message());
    auto it = e.find("adapter");
    if (it != e.end() && !it->is_null()) {
      entry.adapter_field = *it;
      const std::string name = it->is_string() ? it->get<std::string>() : "";
      auto slot = adapter_slots.find(name);
      if (slot == adapter_slots.end()) {
        return InvalidArgument(at + ": adapter " + JsonToString(*it, -1, 80) +
                               " is not loaded (give it with --lora NAME=DIR)");
      }
      r.adapter_slot = slot->second;
    }
    total += static_cast<int64_t>(r.prompt.size()) + r.params.max_tokens;
    out.push_back(std::move(entry));
  }
  *total_tokens = total;
  return out;
}

}  // namespace loom::cli
