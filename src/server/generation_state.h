// GenerationState: the choices of one HTTP request, filled by engine-thread callbacks, read by the HTTP thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "engine/async_engine.h"
#include "server/metrics.h"

namespace loom::server {

using Clock = std::chrono::steady_clock;

struct ChoiceState {
  int64_t seq_id = -1;
  int prompt_index = 0;
  std::deque<SequenceUpdate> pending;  // delivered by the engine, not yet consumed
  bool finished = false;               // the last update is in `pending` (or consumed)
  bool got_first = false;
  Clock::time_point last_token;
  // Consumed so far (HTTP thread only).
  std::string text;
  std::vector<int32_t> token_ids;
  std::vector<TokenLogprob> logprobs;
  std::vector<std::vector<TokenLogprob>> top;
  // prompt_logprobs / echo with logprobs: prompt tokens 1.. (from the first token's update)
  std::vector<TokenLogprob> prompt_logprobs;
  std::vector<int32_t> prompt_ranks;
  std::vector<std::vector<TokenLogprob>> prompt_top;
  FinishReason finish_reason = FinishReason::kNone;
  std::string stop_reason;
  int32_t stop_token = -1;
  std::string error;
};

// Thread-safety: `mu` guards pending/finished/unfinished; the consumed fields belong to the HTTP
// I/O thread that serves the request. `wake` and `wake_each_update` are set before the first
// sequence is submitted.
struct GenerationState {
  std::mutex mu;
  std::vector<ChoiceState> choices;
  int unfinished = 0;
  // The choices' pending updates together: how many, and about how much memory they hold
  // (PendingBytes), what a stream's client has not taken yet.
  size_t pending_updates = 0;
  size_t pending_bytes = 0;
  // Every request's pending_bytes together (the server's count), or null; kept by the two below.
  std::atomic<size_t>* all_pending_bytes = nullptr;
  void AddPending(size_t bytes) {  // under mu
    pending_bytes += bytes;
    if (all_pending_bytes != nullptr) all_pending_bytes->fetch_add(bytes);
  }
  void TakePending(size_t bytes) {  // under mu
    pending_bytes -= bytes;
    if (all_pending_bytes != nullptr) all_pending_bytes->fetch_sub(bytes);
  }
  GenerationState() = default;
  GenerationState(const GenerationState&) = delete;
  GenerationState& operator=(const GenerationState&) = delete;
  ~GenerationState() {  // updates never taken (a client that left) leave the server's count
    if (all_pending_bytes != nullptr) all_pending_bytes->fetch_sub(pending_bytes);
  }
  bool failed = false;  // a choice ended in error: the others are cancelled (see CompletionReply)
  std::function<void()> wake;     // tells the connection there is something to write
  bool wake_each_update = false;  // a stream; else only when every choice has finished
  Clock::time_point start = Clock::now();
  // A stream with return_token_ids or echo: each prompt's ids (set before the stream starts,
  // then read only by its writer), sent or echoed with each choice's first chunk as vLLM does.
  std::vector<std::vector<int32_t>> prompt_ids;
  // The request's share of /load's server_load (HoldServerLoad): released with the state, once
  // the reply or stream and the engine's callbacks have all let go of it.
  std::shared_ptr<const void> load_hold;
};

// The engine callback of choice `index`: records metrics and queues the update.
AsyncEngine::Callback MakeChoiceCallback(std::shared_ptr<GenerationState> state, size_t index,
                                         Metrics* metrics);

// About how much memory `u` holds while it waits in `pending`: the update itself, its text and
// its log-prob entries (a prompt's included).
size_t PendingBytes(const SequenceUpdate& u);

// Moves a consumed update into the choice's accumulated fields.
void Accumulate(ChoiceState* choice, const SequenceUpdate& u);
// The same for a stream, which writes each token as it comes: keeps only the update's own token,
// log-prob and alternatives (index 0), the prompt's log-probs (sent once, for echo) and the
// finish fields; the text is not kept.
void KeepLast(ChoiceState* choice, const SequenceUpdate& u);

}  // namespace loom::server
