// vLLM 0.32's request fields (CompletionRequest, ChatCompletionRequest) that loom accepts without
// effect, one check each: at their default only, or, where vLLM ignores them too, any valid value.
#include "server/vllm_fields.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "engine/request_fields.h"

namespace loom::server {

using json = nlohmann::ordered_json;

namespace {

enum class Where { kBoth, kCompletions, kChat };

struct Field {
  const char* name;
  Where where;
  // "" when the value is accepted, else the 400's message.
  std::string (*check)(const json& v);
};

bool IsInteger(const json& v) {
  return v.is_number_integer() || (v.is_number_float() && std::isfinite(v.get<double>()) &&
                                   v.get<double>() == std::floor(v.get<double>()));
}
bool IsEmpty(const json& v) {
  return v.is_null() || ((v.is_object() || v.is_array()) && v.empty());
}

// What vLLM's clients send for a feature loom lacks: accepted when null (or the value that asks
// for nothing), else "loom does not support <what>".
std::string Lacks(bool accepted, const std::string& what) {
  return accepted ? "" : "loom does not support " + what;
}

const Field kFields[] = {
    // Beam search (vLLM's use_beam_search with its length_penalty; early_stopping from vLLM's
    // older request models).
    {"use_beam_search", Where::kBoth,
     [](const json& v) {
       return Lacks(v.is_null() || v == false, "beam search (use_beam_search must be false)");
     }},
    {"length_penalty", Where::kBoth,
     [](const json& v) {
       return Lacks(v.is_null() || (v.is_number() && v.get<double>() == 1.0),
                    "beam search, whose length_penalty this is (it must be 1.0)");
     }},
    {"early_stopping", Where::kBoth,
     [](const json& v) {
       return Lacks(v.is_null() || v == false, "beam search (early_stopping must be false)");
     }},
    {"watermarking", Where::kBoth,
     [](const json& v) {
       return Lacks(v.is_null() || v == false, "watermarking (watermarking must be false)");
     }},
    {"logprob_token_ids", Where::kBoth,
     [](const json& v) {
       return Lacks(IsEmpty(v), "logprob_token_ids (log-probs of chosen token ids)");
     }},
    {"structured_outputs", Where::kBoth,
     [](const json& v) { return Lacks(v.is_null(), "structured output (structured_outputs)"); }},
    {"repetition_detection", Where::kBoth,
     [](const json& v) { return Lacks(v.is_null(), "repetition_detection"); }},
    {"thinking_token_budget", Where::kBoth,
     [](const json& v) -> std::string {
       if (v.is_null() || (v.is_number_integer() && v == -1)) return "";  // -1: unlimited (vLLM)
       if (!v.is_number_integer() || v.get<double>() < 0) {
         return "thinking_token_budget must be a non-negative integer or -1 for unlimited";
       }
       return "loom does not support thinking_token_budget (it has no reasoning parser; -1, "
              "unlimited, is accepted)";
     }},
    // vLLM batches this many tokens per chunk; loom sends every token (vLLM's default, 1).
    {"stream_interval", Where::kBoth,
     [](const json& v) -> std::string {
       if (v.is_null() || (IsInteger(v) && v.get<double>() == 1)) return "";
       if (!IsInteger(v) || v.get<double>() < 1) return "stream_interval must be an integer ≥ 1";
       return "loom does not support stream_interval above 1: it sends a chunk per token";
     }},
    // Disaggregated serving and custom extensions: vLLM acts on any non-empty value.
    {"kv_transfer_params", Where::kBoth,
     [](const json& v) {
       return Lacks(IsEmpty(v) && !v.is_array(), "disaggregated serving (kv_transfer_params)");
     }},
    {"ec_transfer_params", Where::kBoth,
     [](const json& v) {
       return Lacks(IsEmpty(v) && !v.is_array(),
                    "encoder-cache disaggregated serving (ec_transfer_params)");
     }},
    {"vllm_xargs", Where::kBoth,
     [](const json& v) {
       return Lacks(IsEmpty(v) && !v.is_array(),
                    "vllm_xargs (it has no extensions that read them)");
     }},
    // vLLM 0.32 orders its queue by priority only under --scheduling-policy priority; its
    // default, first come first served, takes any priority and ignores it (the field's text says
    // a non-zero one is refused there, but the V1 engine no longer checks). loom's scheduler is
    // first come first served.
    {"priority", Where::kBoth,
     [](const json& v) -> std::string {
       int64_t priority = 0;
       if (v.is_null()) return "";
       const Status st = JsonInt("priority", v, std::numeric_limits<int64_t>::min(),
                                 std::numeric_limits<int64_t>::max(), &priority);
       return st.ok() ? "" : st.message();
     }},
    // A session's id: vLLM labels its KV-cache events with it (loom publishes none).
    {"session_id", Where::kBoth,
     [](const json& v) -> std::string {
       return v.is_null() || v.is_string() ? "" : "session_id must be a string";
     }},
    // vLLM ignores these on the generation routes (its render endpoints read them), and returns
    // routed experts only with a server flag.
    {"return_token_offsets", Where::kBoth,
     [](const json& v) -> std::string {
       return v.is_null() || v.is_boolean() ? "" : "return_token_offsets must be a boolean";
     }},
    {"mm_payload", Where::kBoth,
     [](const json& v) -> std::string {
       return v.is_null() || v == "tensors" || v == "none"
                  ? ""
                  : "mm_payload must be 'tensors' or 'none'";
     }},
    {"return_mm_kwargs", Where::kBoth,
     [](const json& v) -> std::string {
       return v.is_null() || v.is_boolean() ? "" : "return_mm_kwargs must be a boolean";
     }},
    {"routed_experts_prompt_start", Where::kBoth,
     [](const json& v) -> std::string {
       return v.is_null() || (IsInteger(v) && v.get<double>() >= 0)
                  ? ""
                  : "routed_experts_prompt_start must be an integer ≥ 0";
     }},
    // vLLM's older request models (≤ 0.10): logits processors by name and guided decoding,
    // which vLLM 0.32 ignores (its output then unconstrained) and loom refuses unless null.
    {"logits_processors", Where::kBoth,
     [](const json& v) { return Lacks(v.is_null(), "logits_processors"); }},
    {"guided_json", Where::kBoth,
     [](const json& v) { return Lacks(v.is_null(), "guided decoding (guided_json)"); }},
    {"guided_regex", Where::kBoth,
     [](const json& v) { return Lacks(v.is_null(), "guided decoding (guided_regex)"); }},
    {"guided_choice", Where::kBoth,
     [](const json& v) { return Lacks(v.is_null(), "guided decoding (guided_choice)"); }},
    {"guided_grammar", Where::kBoth,
     [](const json& v) { return Lacks(v.is_null(), "guided decoding (guided_grammar)"); }},
    {"guided_decoding_backend", Where::kBoth,
     [](const json& v) { return Lacks(v.is_null(), "guided decoding (guided_decoding_backend)"); }},
    {"guided_whitespace_pattern", Where::kBoth,
     [](const json& v) {
       return Lacks(v.is_null(), "guided decoding (guided_whitespace_pattern)");
     }},
    {"structural_tag", Where::kBoth,
     [](const json& v) { return Lacks(v.is_null(), "structured output (structural_tag)"); }},
    // /v1/completions
    {"prompt_embeds", Where::kCompletions,
     [](const json& v) { return Lacks(IsEmpty(v) && !v.is_object(), "prompt_embeds"); }},
    // /v1/chat/completions
    {"include_reasoning", Where::kChat,
     [](const json& v) {
       return Lacks(v.is_null() || v == true,
                    "include_reasoning false: it has no reasoning parser (it must be true)");
     }},
    {"documents", Where::kChat,
     [](const json& v) {
       return Lacks(v.is_null(), "documents (RAG documents are not rendered)");
     }},
    // As vLLM without --trust-request-chat-template.
    {"chat_template", Where::kChat,
     [](const json& v) -> std::string {
       return v.is_null() ? ""
                          : "a chat template in the request is not accepted (as vLLM without "
                            "--trust-request-chat-template): start the server with "
                            "--chat-template";
     }},
    {"mm_processor_kwargs", Where::kChat,
     [](const json& v) {
       return Lacks(IsEmpty(v) && !v.is_array(), "mm_processor_kwargs: it serves text only");
     }},
    {"media_io_kwargs", Where::kChat,
     [](const json& v) {
       return Lacks(IsEmpty(v) && !v.is_array(), "media_io_kwargs: it serves text only");
     }},
    {"return_prompt_text", Where::kChat,
     [](const json& v) {
       return Lacks(v.is_null() || v == false, "return_prompt_text (it must be false)");
     }},
};

}  // namespace

bool CheckNoEffectField(const std::string& key, const json& v, Endpoint endpoint,
                        std::string* message) {
  const Field* f = std::find_if(std::begin(kFields), std::end(kFields),
                                [&](const Field& x) { return key == x.name; });
  if (f == std::end(kFields)) return false;
  const bool applies = f->where == Where::kBoth ||
                       (f->where == Where::kCompletions && endpoint == Endpoint::kCompletions) ||
                       (f->where == Where::kChat && endpoint == Endpoint::kChat);
  if (!applies) return false;
  *message = f->check(v);
  return true;
}

}  // namespace loom::server
