// What a caller asks the engine for (GenerationRequest) and what it gets back, per step and at the end.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/sampler.h"
#include "lora/adapter.h"
#include "tokenizer/detokenizer.h"

namespace loom {

struct GenerationRequest {
  std::vector<int32_t> prompt;
  // The adapter this request runs with (a lease: it stays alive while the sequence runs), or
  // null for the base model. `adapter_slot` is the older form (Engine::AddAdapter's slot) and
  // is used when `adapter` is null; -1 = base model.
  std::shared_ptr<const Adapter> adapter;
  int adapter_slot = -1;
  SamplingParams params;
  std::vector<std::string> stop;         // stop strings (need the engine's tokenizer)
  std::vector<int32_t> stop_token_ids;   // finish with "stop" after any of these (kept in output)
  bool include_stop_str_in_output = false;
  bool detokenize = false;               // produce text (stream deltas) with the engine's tokenizer
  bool skip_special_tokens = true;
  // Optional: a detokenizer already primed with `prompt` (StreamingDetokenizer::Prime) by the
  // caller, over the engine's tokenizer with skip_special_tokens as here; the engine copies it
  // instead of priming on its own thread. A prompt whose last 4-23 ids never decode cleanly
  // primes with every prompt id (as vLLM): the server primes each prompt once on its handler
  // thread, not once per `n` copy on the engine thread (64 prompts × n 9 × 32k ids stalled
  // every stream for tens of seconds).
  std::shared_ptr<const tokenizer::StreamingDetokenizer> primed;
  // ≥ 0: the log-prob of every prompt token after the first (given the tokens before it) and
  // the top `prompt_logprobs` alternatives there (vLLM's prompt_logprobs; echo + logprobs).
  // Such a request does not use the prefix cache (cached positions compute no logits).
  int prompt_logprobs = -1;
  // vLLM's cache_salt: mixed into the prefix-cache key of the first block (and so of every block
  // chained on it), so requests with different salts (or none) never share cached blocks.
  std::string cache_salt;
  bool return_prompt_logits = false;  // keep the logits of every prompt position (tests)
  bool return_step_logits = false;    // keep the logits of every generated step (tests)
};

enum class FinishReason { kNone, kStop, kLength, kAbort, kError };
const char* FinishReasonName(FinishReason r);  // "stop" | "length" | "abort" | "error"

struct GenerationResult {
  int64_t id = 0;
  std::vector<int32_t> prompt;
  std::vector<int32_t> generated;
  FinishReason finish_reason = FinishReason::kNone;
  std::string stop_reason;  // the stop string that ended it, if any
  int32_t stop_token = -1;  // the stop_token_ids entry that ended it, if any
  std::string error;        // kError: what went wrong
  std::string text;         // decoded output (when request.detokenize or stop strings)
  std::vector<TokenLogprob> logprobs;                   // [generated] chosen token
  std::vector<std::vector<TokenLogprob>> top_logprobs;  // [generated][N]
  // request.prompt_logprobs ≥ 0: [prompt_len - 1] for prompt tokens 1.. (the raw log_softmax
  // at the position before each), its rank in the vocabulary (1 = most likely), and the top list.
  std::vector<TokenLogprob> prompt_logprobs;
  std::vector<int32_t> prompt_ranks;
  std::vector<std::vector<TokenLogprob>> prompt_top_logprobs;
  std::vector<float> prompt_logits;  // [prompt_len, vocab] when requested
  std::vector<float> step_logits;    // [generated, vocab] when requested
  int num_cached_prompt_tokens = 0;  // prompt positions served from the prefix cache
};

// What one step produced for one sequence: at most one new token, its text delta, and the end.
struct SequenceUpdate {
  int64_t id = 0;
  bool has_token = false;
  int32_t token = 0;
  TokenLogprob logprob{};           // when params.logprobs > 0
  std::vector<TokenLogprob> top;    // [params.logprobs]
  std::string text;                 // newly final text (after stop-string hold-back)
  // With the first token: GenerationResult's prompt_logprobs, prompt_ranks, prompt_top_logprobs.
  std::vector<TokenLogprob> prompt_logprobs;
  std::vector<int32_t> prompt_ranks;
  std::vector<std::vector<TokenLogprob>> prompt_top_logprobs;
  FinishReason finish_reason = FinishReason::kNone;  // kNone while running
  std::string stop_reason;   // the stop string that ended it
  int32_t stop_token = -1;   // the stop token id that ended it
  std::string error;
  int prompt_tokens = 0;
  int generated_tokens = 0;
  int cached_prompt_tokens = 0;
};

}  // namespace loom
