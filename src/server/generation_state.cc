// Engine callbacks: metrics (TTFT, ITL, e2e, token counts) and hand-over to the HTTP thread.
#include "server/generation_state.h"

namespace loom::server {

AsyncEngine::Callback MakeChoiceCallback(std::shared_ptr<GenerationState> state, size_t index,
                                         Metrics* metrics) {
  return [state = std::move(state), index, metrics](SequenceUpdate&& u) {
    const Clock::time_point now = Clock::now();
    std::unique_lock<std::mutex> lock(state->mu);
    ChoiceState& c = state->choices[index];
    if (u.has_token) {
      metrics->generation_tokens.fetch_add(1);
      if (!c.got_first) {
        // As vLLM's counter: a sequence's prompt counts once its prefill ends (its first token),
        // so a request aborted or failed in the queue adds nothing; each of n sequences counts it.
        metrics->prompt_tokens.fetch_add(u.prompt_tokens);
        metrics->ttft.Observe(std::chrono::duration<double>(now - state->start).count());
        c.got_first = true;
      } else {
        metrics->itl.Observe(std::chrono::duration<double>(now - c.last_token).count());
      }
      c.last_token = now;
    }
    if (u.finish_reason != FinishReason::kNone) {
      metrics->e2e.Observe(std::chrono::duration<double>(now - state->start).count());
      switch (u.finish_reason) {
        case FinishReason::kStop: metrics->success_stop.fetch_add(1); break;
        case FinishReason::kLength: metrics->success_length.fetch_add(1); break;
        case FinishReason::kAbort: metrics->success_abort.fetch_add(1); break;
        case FinishReason::kError:
          metrics->success_error.fetch_add(1);
          break;
        case FinishReason::kNone: break;
      }
      c.finished = true;
      --state->unfinished;
    }
    // A failed choice wakes a waiting (non-streamed) reply too, which then cancels the others:
    // the client gets its 500 now, not after the siblings ran to max_tokens for nobody.
    const bool failed_now = u.finish_reason == FinishReason::kError && !state->failed;
    if (failed_now) state->failed = true;
    ++state->pending_updates;
    state->AddPending(PendingBytes(u));
    c.pending.push_back(std::move(u));
    const bool wake = state->wake_each_update || state->unfinished == 0 || failed_now;
    lock.unlock();
    if (wake && state->wake) state->wake();
  };
}

size_t PendingBytes(const SequenceUpdate& u) {
  size_t bytes = sizeof(SequenceUpdate) + u.text.size() + u.error.size() + u.stop_reason.size() +
                 (u.top.size() + u.prompt_logprobs.size()) * sizeof(TokenLogprob) +
                 u.prompt_ranks.size() * sizeof(int32_t);
  for (const auto& top : u.prompt_top_logprobs) {
    bytes += sizeof(top) + top.size() * sizeof(TokenLogprob);
  }
  return bytes;
}

namespace {
void TakeFinish(ChoiceState* c, const SequenceUpdate& u) {
  if (u.finish_reason == FinishReason::kNone) return;
  c->finish_reason = u.finish_reason;
  c->stop_reason = u.stop_reason;
  c->stop_token = u.stop_token;
  c->error = u.error;
}

void TakePromptLogprobs(ChoiceState* c, const SequenceUpdate& u) {
  if (u.prompt_logprobs.empty()) return;
  c->prompt_logprobs = u.prompt_logprobs;
  c->prompt_ranks = u.prompt_ranks;
  c->prompt_top = u.prompt_top_logprobs;
}
}  // namespace

void Accumulate(ChoiceState* c, const SequenceUpdate& u) {
  c->text += u.text;
  TakePromptLogprobs(c, u);
  if (u.has_token) {
    c->token_ids.push_back(u.token);
    c->logprobs.push_back(u.logprob);
    c->top.push_back(u.top);
  }
  TakeFinish(c, u);
}

void KeepLast(ChoiceState* c, const SequenceUpdate& u) {
  TakePromptLogprobs(c, u);  // an echoed stream sends them with the choice's first chunk
  if (u.has_token) {
    // The last 5 tokens: a chunk's log-prob text is decoded with up to 4 before it (vLLM's
    // rebuild of a character split over tokens).
    if (c->token_ids.size() >= 5) {
      c->token_ids.erase(c->token_ids.begin());
      c->logprobs.erase(c->logprobs.begin());
      c->top.erase(c->top.begin());
    }
    c->token_ids.push_back(u.token);
    c->logprobs.push_back(u.logprob);
    c->top.push_back(u.top);
  }
  TakeFinish(c, u);
}

}  // namespace loom::server
