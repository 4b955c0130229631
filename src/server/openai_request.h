// OpenAI request bodies (/v1/completions, /v1/chat/completions, vLLM's /tokenize and /detokenize):
// strict parsing and validation.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "engine/sampler.h"
#include "server/api_error.h"

namespace loom::server {

// kTokenize takes vLLM's two forms: {"prompt": text} or {"messages": [...]} (the chat prompt).
enum class Endpoint { kCompletions, kChat, kTokenize, kDetokenize };

// One prompt of a completions request: text or token ids.
using Prompt = std::variant<std::string, std::vector<int32_t>>;

// A parsed request. Every field of the body is honoured here, accepted with no effect (listed
// in docs/API.md), or rejected by ParseOpenAiRequest with 400 naming it.
struct OpenAiRequest {
  Endpoint endpoint = Endpoint::kCompletions;
  std::string model;  // /tokenize and /detokenize: empty when not sent (the base model)
  std::string request_id;  // vLLM's: the response id's suffix when no X-Request-Id header
  // /v1/completions
  std::vector<Prompt> prompts;  // one or more; choices are prompt-major, n per prompt
  bool echo = false;
  // max_tokens 0 with echo (OpenAI's legacy prompt scoring; vLLM's echo_without_generation):
  // one token runs (params.max_tokens 1) and the answer holds the prompt alone.
  bool echo_only = false;
  // /v1/chat/completions
  nlohmann::ordered_json messages;               // a non-empty list of message objects
  nlohmann::ordered_json chat_template_kwargs;   // an object or null
  bool add_generation_prompt = true;
  bool continue_final_message = false;
  bool add_special_tokens = true;  // completions: true; chat: false (as vLLM)
  // Chat `echo` (vLLM): the last message's content leads each choice's content when its role is
  // the response's (ResponseRole: with continue_final_message, the message being continued).
  bool echo_last_message = false;
  // Both
  SamplingParams params;
  std::vector<std::string> sampling_given;  // sampling fields the body set (not null)
  bool max_tokens_given = false;  // else chat fills the context; completions use 16
  std::string max_tokens_field = "max_tokens";  // or "max_completion_tokens": errors name it
  int n = 1;
  bool stream = false;
  bool include_usage = false;
  bool continuous_usage_stats = false;
  int logprobs = 0;          // top-N alternatives per token
  int prompt_logprobs = -1;  // vLLM's prompt_logprobs: ≥ 0 = each prompt token's log-prob + top-N
  bool want_logprobs = false;  // logprobs requested at all (chat: logprobs=true)
  std::vector<std::string> stop;
  std::vector<int32_t> stop_token_ids;
  bool include_stop_str_in_output = false;
  bool skip_special_tokens = true;
  bool return_token_ids = false;  // vLLM extension: token ids in choices
  // vLLM's return_tokens_as_token_ids: log-prob entries name tokens "token_id:N"; unset (null),
  // the server's --return-tokens-as-token-ids decides.
  std::optional<bool> return_tokens_as_token_ids;
  // vLLM's cache_salt: requests share cached prefix blocks only with the same salt ("" = none).
  std::string cache_salt;
  // vLLM's bad_words: each encoded (BuildPrompts' neighbour EncodeBadWords) into
  // params.bad_words_token_ids.
  std::vector<std::string> bad_words;
  // vLLM's truncate_prompt_tokens: 0 = off; -1 = the model's context; k ≥ 1 keeps each prompt's
  // last k tokens.
  int truncate_prompt_tokens = 0;
  // vLLM's truncation_side with it: "left" / "right" keep exactly the last / first k tokens;
  // "" (unset) the tokenizer's left truncation, which keeps a text prompt's special tokens.
  std::string truncation_side;
  // /tokenize: the prompt in `prompts` (one string) or `messages`; /detokenize: `tokens`
  bool return_token_strs = false;
  std::vector<int32_t> tokens;

  // The prompt is a chat rendered through the template (chat, or /tokenize's messages form).
  bool has_messages() const { return !messages.is_null(); }
};

// Each sequence holds its own logit_bias (in its request and its sampler): a vocabulary-sized
// map times 64 prompts × n = 16 would pin gigabytes. More than kMaxLogitBiasEntries entries ×
// `sequences` is a 400 naming logit_bias.
inline constexpr int64_t kMaxLogitBiasEntries = int64_t{1} << 22;
bool CheckLogitBiasBudget(const OpenAiRequest& r, int64_t sequences, ApiError* error);

// As vLLM 0.32 (SamplingParams._verify_greedy_sampling): n > 1 with greedy sampling (a
// temperature below 1e-5, the model's recommended one once applied) would give n identical
// choices, whatever the seed: a 400 naming n, in vLLM's words.
bool CheckGreedyChoices(const OpenAiRequest& r, ApiError* error);

// A client's request id (X-Request-Id, or the body's request_id) fit to name a response: it lands
// in response bodies and logs, so 1-128 visible ASCII characters.
bool UsableRequestId(std::string_view id);

// Prompt log-probs (prompt_logprobs, or echo with logprobs) come all at once, when a sequence's
// prompt has run: (top-N + 1) entries per prompt token per sequence, held by the engine's result
// and the reply, then written as one JSON body — or, streamed, as each choice's first chunk,
// built on the connection's I/O thread. More than kMaxPromptLogprobEntries (streamed:
// kMaxStreamPromptLogprobEntries) entries in one request is a 400 naming the field that asked
// for them (a 64-prompt × n = 16 echo of 2K-token prompts at top-20 was ~43M entries: gigabytes
// of JSON). lm-evaluation-harness's loglikelihood batches (echo, logprobs 1, n 1) stay far below.
inline constexpr int64_t kMaxPromptLogprobEntries = int64_t{1} << 20;
inline constexpr int64_t kMaxStreamPromptLogprobEntries = int64_t{1} << 18;
// The top-N each prompt token's log-prob entry carries: prompt_logprobs, or with echo and
// logprobs the logprobs asked (the larger); -1 when the prompt is not scored.
int PromptLogprobsTop(const OpenAiRequest& r);
bool CheckPromptLogprobBudget(const OpenAiRequest& r, const std::vector<std::vector<int32_t>>& prompts,
                              ApiError* error);

// Arrays and objects in one request body (JsonLimits::max_containers): a DOM costs ~50-300 bytes
// a container, and an 8 MiB body of "[[],[],…]" held 2.8 M of them (812 MB with a chat request's
// copies). Real requests have a few per message; a token-id prompt is one array.
inline constexpr int64_t kMaxRequestContainers = int64_t{1} << 16;
// JSON values in `messages`, and in `chat_template_kwargs`: each becomes a template value
// (~128 bytes) beside its copies, where a long chat has a few thousand.
inline constexpr int64_t kMaxTemplateValues = int64_t{1} << 17;

// Parses and validates a body. On failure fills *error (400 naming the field) and returns false.
// `max_nesting` bounds the JSON depth (checked before parsing).
bool ParseOpenAiRequest(const std::string& body, Endpoint endpoint, OpenAiRequest* out,
                        ApiError* error, int max_nesting = 64);

}  // namespace loom::server
