// The per-choice engine callback's metrics: every way a sequence finishes is counted under vLLM's
// finished_reason (stop, length, abort, error), and the e2e histogram never holds a request the
// counters do not.
#include "server/generation_state.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "server/metrics.h"

namespace loom::server {
namespace {

SequenceUpdate Token(int32_t id, int prompt_tokens = 5) {
  SequenceUpdate u;
  u.has_token = true;
  u.token = id;
  u.prompt_tokens = prompt_tokens;  // every token's update carries its sequence's prompt length
  return u;
}

SequenceUpdate Finish(FinishReason reason) {
  SequenceUpdate u;
  u.finish_reason = reason;
  if (reason == FinishReason::kError) u.error = "non-finite logits";
  return u;
}

// A non-streamed request's state with n choices; `wakes` counts the connection's wake-ups.
std::shared_ptr<GenerationState> NonStreamed(int n, int* wakes) {
  auto state = std::make_shared<GenerationState>();
  state->choices.resize(static_cast<size_t>(n));
  state->unfinished = n;
  state->wake = [wakes] { ++*wakes; };
  return state;
}

// Each choice's engine callback, in choice order.
std::vector<AsyncEngine::Callback> Callbacks(const std::shared_ptr<GenerationState>& state,
                                             Metrics* metrics) {
  std::vector<AsyncEngine::Callback> cb;
  for (size_t i = 0; i < state->choices.size(); ++i)
    cb.push_back(MakeChoiceCallback(state, i, metrics));
  return cb;
}

TEST(GenerationState, EveryFinishReasonIsCountedOnce) {
  Metrics metrics;
  int wakes = 0;
  auto state = NonStreamed(4, &wakes);
  const FinishReason reasons[] = {FinishReason::kStop, FinishReason::kLength, FinishReason::kAbort,
                                  FinishReason::kError};
  for (size_t i = 0; i < 4; ++i) {
    auto cb = MakeChoiceCallback(state, i, &metrics);
    if (i < 2) cb(Token(7));  // the abort and the error come before any token
    cb(Finish(reasons[i]));
  }
  EXPECT_EQ(metrics.success_stop.load(), 1);
  EXPECT_EQ(metrics.success_length.load(), 1);
  EXPECT_EQ(metrics.success_abort.load(), 1);
  EXPECT_EQ(metrics.success_error.load(), 1);
  EXPECT_EQ(metrics.generation_tokens.load(), 2);
  EXPECT_EQ(state->unfinished, 0);
  EXPECT_EQ(wakes, 1);  // not a stream: woken once, when the last choice finished

  const std::string text = RenderMetrics(metrics, MetricsSnapshot{}, "m");
  for (const char* reason : {"stop", "length", "abort", "error"}) {
    EXPECT_NE(
        text.find(std::string("vllm:request_success_total{model_name=\"m\",finished_reason=\"") +
                  reason + "\"} 1\n"),
        std::string::npos)
        << reason << "\n"
        << text;
  }
  // Four requests finished: the e2e histogram's count equals the counters' sum.
  EXPECT_NE(text.find("vllm:e2e_request_latency_seconds_count{model_name=\"m\"} 4\n"),
            std::string::npos)
      << text;
}

TEST(GenerationState, AFailedChoiceWakesAWaitingReplyAtOnce) {
  // Not a stream: a reply waits for every choice, so a failed one must wake it (to cancel the
  // others) instead of waiting for its siblings to run to max_tokens.
  Metrics metrics;
  int wakes = 0;
  auto state = NonStreamed(3, &wakes);
  auto cb = Callbacks(state, &metrics);
  cb[0](Token(3));
  cb[1](Token(4));
  EXPECT_EQ(wakes, 0);
  cb[0](Finish(FinishReason::kError));
  EXPECT_EQ(wakes, 1);
  EXPECT_TRUE(state->failed);
  cb[1](Token(5));  // still running: no wake for its token
  EXPECT_EQ(wakes, 1);
  cb[1](Finish(FinishReason::kAbort));  // cancelled
  cb[2](Finish(FinishReason::kAbort));
  EXPECT_EQ(wakes, 2);  // the last one finished
  EXPECT_EQ(state->unfinished, 0);
}

TEST(GenerationState, PromptTokensCountOnceAPrefilledSequence) {
  // As vLLM: a sequence's prompt is counted when its prefill ends (its first token), once per
  // sequence (n sequences count it n times), and not at all for one aborted before its first.
  Metrics metrics;
  int wakes = 0;
  auto state = NonStreamed(3, &wakes);
  auto cb = Callbacks(state, &metrics);
  cb[0](Token(1, 11));
  cb[0](Token(2, 11));
  cb[0](Token(3, 11));
  cb[1](Token(4, 11));
  EXPECT_EQ(metrics.prompt_tokens.load(), 22);
  cb[2](Finish(FinishReason::kAbort));  // left the queue before its prefill ended
  cb[0](Finish(FinishReason::kLength));
  cb[1](Finish(FinishReason::kLength));
  EXPECT_EQ(metrics.prompt_tokens.load(), 22);
  EXPECT_EQ(metrics.generation_tokens.load(), 4);
}

}  // namespace
}  // namespace loom::server
