// Sampler: one row of logits → a token (allowed_token_ids, bad_words, logit_bias, min_tokens,
// penalties, temperature, top-k/p, min-p, seed).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "base/status.h"

namespace loom {

struct SamplingParams {
  int max_tokens = 16;
  float temperature = 1.0f;       // ≤ 0 (or below 1e-5) → greedy
  int top_k = 0;                  // 0 or -1 = off
  float top_p = 1.0f;             // (0, 1]
  float min_p = 0.0f;             // [0, 1]
  float repetition_penalty = 1.0f;  // > 0; 1 = off (prompt and output tokens, as vLLM)
  float presence_penalty = 0.0f;    // [-2, 2] (output tokens, as OpenAI)
  float frequency_penalty = 0.0f;   // [-2, 2]
  std::optional<uint64_t> seed;
  int logprobs = 0;               // top-N log-probs per step (0 = none)
  bool ignore_eos = false;
  // Whether allowed_token_ids, bad_words or min_tokens may mask tokens at `step`.
  bool Constrains(int64_t step) const {
    return allowed_token_ids != nullptr || !bad_words_token_ids.empty() || step < min_tokens;
  }
  // Added to the token's logit before the penalties (vLLM's order), greedy included; sorted by
  // token, one entry per token, each in [-100, 100]. Log-probs stay those of the raw logits.
  std::vector<std::pair<int32_t, float>> logit_bias;
  // The first min_tokens tokens are never a stop token (EOS, stop_token_ids: their logits are
  // -inf, ignore_eos or not, as vLLM) and never end a stop string. ≤ max_tokens.
  int min_tokens = 0;
  // vLLM's allowed_token_ids: when set, every other token's logit is -inf (greedy included);
  // sorted, unique, non-empty, inside the vocabulary. Log-probs stay those of the raw logits.
  // Shared: a request's n × prompts sequences (and their samplers) hold one copy, whatever its
  // length (up to the vocabulary).
  std::shared_ptr<const std::vector<int32_t>> allowed_token_ids;
  // vLLM's bad_words as token sequences (the server encodes the words): a sequence's last token
  // is -inf while the generated tokens (not the prompt) end with the rest of it.
  std::vector<std::vector<int32_t>> bad_words_token_ids;

  // Range checks; the message names the field and the limit.
  Status Validate(int vocab_size) const;
};

struct TokenLogprob {
  int32_t token;
  float logprob;
};

// Per-sequence sampling state. Thread-safety: one sequence, one thread at a time.
class Sampler {
 public:
  // `stop_tokens`: what min_tokens holds back (the model's EOS ids and the request's
  // stop_token_ids); ids outside the row are ignored.
  Sampler(const SamplingParams& params, const std::vector<int32_t>& prompt,
          std::vector<int32_t> stop_tokens = {});

  // Picks the next token from logits [vocab] (modified in place). When params.logprobs > 0,
  // also fills `chosen` and `top` from the unmodified distribution (log_softmax of logits).
  // Defined for any floats: a NaN or +inf logit, or a row that is all -inf, is
  // kInvalidArgument naming the step ("sampling step 3: logit of token 17 is NaN ..."). A row
  // the model left drawable but the request's constraints (allowed_token_ids, bad_words,
  // min_tokens) did not is kFailedPrecondition: the engine ends the sequence there ("stop").
  StatusOr<int32_t> Sample(float* logits, int vocab, TokenLogprob* chosen,
                           std::vector<TokenLogprob>* top);
  // Records a generated token (for the penalties).
  void Accept(int32_t token);

  static bool IsGreedy(const SamplingParams& p) { return p.temperature < 1e-5f; }

 private:
  // vLLM v1's order: allowed_token_ids' mask, bad_words', logit_bias, then min_tokens' mask
  // (step = tokens sampled before this one).
  void ApplyMasksAndBias(float* logits, int vocab, int64_t step);
  void ApplyPenalties(float* logits, int vocab);
  // Temperature, top-k, top-p, min-p, draw; best = the row's first maximum (from the scan).
  int32_t Draw(const float* logits, int vocab, int64_t best);

  SamplingParams params_;
  int64_t step_ = 0;  // tokens sampled so far (named in errors)
  std::mt19937_64 rng_;
  std::unordered_map<int32_t, int> output_counts_;
  std::vector<int32_t> output_;  // generated tokens in order, when bad_words needs them
  std::vector<float> raw_;  // [vocab] logits before penalties, for logprobs
  std::vector<uint8_t> seen_;  // [vocab] scratch for the repetition penalty
  std::vector<int32_t> prompt_;
  std::vector<int32_t> stop_tokens_;  // min_tokens' mask
  std::vector<float> probs_;     // [vocab] exp(logit/T − max), scratch
  std::vector<int32_t> order_;  // [vocab] candidate token ids, scratch
  std::vector<int32_t> tail_;   // top-p's crossing bucket, scratch
  std::vector<float> kth_scratch_;  // top-k's crossing bucket, scratch
};

// log_softmax(logits)[token] and the top-n entries, sorted by log-prob descending. `logits` holds
// no NaN or +inf (Sampler::Sample rejects such rows first).
void ComputeLogprobs(const float* logits, int vocab, int32_t token, int top_n,
                     TokenLogprob* chosen, std::vector<TokenLogprob>* top);

// vLLM's rank of `token` in a row: how many tokens have a logit at or above its own (1 = the
// most likely; a token tied with others ranks after all of them, as vLLM's
// batched_count_greater_than counts x >= value).
int32_t TokenRank(const float* logits, int vocab, int32_t token);

}  // namespace loom
