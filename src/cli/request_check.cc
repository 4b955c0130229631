// ValidateRequestSize and the --batch file parser.
#include "cli/request_check.h"

#include "base/json.h"
#include "engine/request_fields.h"

namespace loom::cli {

using json = nlohmann::json;
using ordered_json = nlohmann::ordered_json;

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
  ASSIGN_OR_RETURN(ordered_json entries, ParseOrderedJson(text, where));
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
    const ordered_json& e = entries[i];
    const std::string at = where + " entry " + std::to_string(i);
    BatchEntry entry;
    GenerationRequest& r = entry.request;
    r.params = defaults;
    if (!e.is_object()) {
      return InvalidArgument(at + ": needs {\"prompt_tokens\": [ids], ...}, got " +
                             JsonToString(e, -1, 60));
    }
    // Every key is read or refused: a sampling field is never dropped silently.
    for (auto it = e.begin(); it != e.end(); ++it) {
      const std::string& key = it.key();
      Status st;
      if (key == "prompt_tokens" || key == "adapter") continue;
      if (ParseSamplingField(key, it.value(), &r.params, &st)) {
        if (!st.ok()) return InvalidArgument(at + ": " + st.message());
      } else if (key == "logprobs") {
        if (!it.value().is_null()) {
          st = JsonInt32(key, it.value(), 0, 20, &r.params.logprobs);
          if (!st.ok()) return InvalidArgument(at + ": " + st.message());
        }
      } else {
        return InvalidArgument(
            at + ": unknown field '" + key +
            "' (known: prompt_tokens, adapter, logprobs and the sampling fields "
            "max_tokens, temperature, top_p, top_k, min_p, presence_penalty, "
            "frequency_penalty, repetition_penalty, seed, ignore_eos, min_tokens, "
            "logit_bias, allowed_token_ids)");
      }
    }
    RETURN_IF_ERROR(GetIntList(e, "prompt_tokens", at, &r.prompt, 0, config.vocab_size - 1));
    if (r.prompt.empty()) return InvalidArgument(at + ": prompt_tokens is empty");
    Status st = ValidateRequestSize(config, r.params, static_cast<int64_t>(r.prompt.size()));
    if (!st.ok()) return Status(st.code(), at + ": " + st.message());
    auto it = e.find("adapter");
    if (it != e.end() && !it->is_null()) {
      const std::string name = it->is_string() ? it->get<std::string>() : "";
      auto slot = adapter_slots.find(name);
      if (slot == adapter_slots.end()) {
        return InvalidArgument(at + ": adapter " + JsonToString(*it, -1, 80) +
                               " is not loaded (give it with --lora NAME=DIR)");
      }
      entry.adapter_field = name;
      r.adapter_slot = slot->second;
    }
    total += static_cast<int64_t>(r.prompt.size()) + r.params.max_tokens;
    out.push_back(std::move(entry));
  }
  *total_tokens = total;
  return out;
}

}  // namespace loom::cli
