// SSE stream writing: a choice's failure ends the whole stream, as vLLM's does; bounded pumps
// write what one pump would; large pumps and a backlog too large are told apart.
#include "server/openai_response.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "server/generation_state.h"
#include "server/metrics.h"
#include "server/openai_request.h"
#include "server/server_context.h"

namespace loom::server {
namespace {

SequenceUpdate Token(int64_t id, int32_t token, const std::string& text, int alternatives = 0) {
  SequenceUpdate u;
  u.id = id;
  u.has_token = true;
  u.token = token;
  u.text = text;
  u.logprob = {token, -0.5f};
  for (int k = 0; k < alternatives; ++k) u.top.push_back({token + k, -0.5f - 0.25f * k});
  return u;
}

OpenAiRequest Parse(const std::string& body) {
  OpenAiRequest r;
  ApiError err;
  EXPECT_TRUE(ParseOpenAiRequest(body, Endpoint::kCompletions, &r, &err)) << err.message;
  return r;
}

// A stream's state of `choices` sequences whose updates come through the engine's callbacks.
struct Delivery {
  Metrics metrics;
  std::shared_ptr<GenerationState> state = std::make_shared<GenerationState>();
  std::vector<AsyncEngine::Callback> callbacks;

  explicit Delivery(size_t choices) {
    state->choices.resize(choices);
    state->unfinished = static_cast<int>(choices);
    state->wake_each_update = true;
    for (size_t i = 0; i < choices; ++i) {
      callbacks.push_back(MakeChoiceCallback(state, i, &metrics));
    }
  }
  void Deliver(size_t choice, SequenceUpdate u) { callbacks[choice](std::move(u)); }
};

// vLLM's stream generators write the error event and then only [DONE]: no usage chunk, no more
// deltas of the request's other choices (loom went on streaming them and sent the usage chunk).
TEST(StreamWriter, AChoicesErrorEndsTheStream) {
  ServerContext ctx;  // no tokenizer: none needed for text already decoded
  const OpenAiRequest r = Parse(
      R"({"model":"m","prompt":["a","b"],"stream":true,"stream_options":{"include_usage":true}})");
  Delivery d(2);
  d.state->choices[1].prompt_index = 1;
  StreamWriter writer(ctx, r, ResponseMeta{"cmpl-x", 1, "m", 2}, d.state);
  d.Deliver(0, Token(0, 7, "ok"));
  std::string out;
  EXPECT_FALSE(writer.Pump(&out));
  EXPECT_NE(out.find("\"ok\""), std::string::npos) << out;
  EXPECT_FALSE(writer.failed());

  SequenceUpdate failure;
  failure.id = 1;
  failure.finish_reason = FinishReason::kError;
  failure.error = "sampling step 0: logit of token 3 is NaN";
  d.Deliver(1, failure);
  out.clear();
  EXPECT_TRUE(writer.Pump(&out));
  EXPECT_TRUE(writer.failed());
  const std::string error_event = "data: {\"error\":";
  ASSERT_EQ(out.rfind(error_event, 0), 0u) << out;
  EXPECT_NE(out.find("logit of token 3 is NaN"), std::string::npos) << out;
  // [DONE] right after it: no usage chunk (include_usage asked for one).
  const size_t event_end = out.find("\n\n") + 2;
  EXPECT_EQ(out.substr(event_end), "data: [DONE]\n\n") << out;
  // The other choice's later tokens are not written (its sequence is aborted by the source).
  d.Deliver(0, Token(0, 8, "after"));
  out.clear();
  EXPECT_TRUE(writer.Pump(&out));
  EXPECT_TRUE(out.empty()) << out;
}

// vLLM 0.32's chat stream (no reasoning or tool parser) writes DeltaMessage(content=text) for
// every token: the finish chunk of a choice whose last token adds no text (EOS, a stop token id)
// has "delta": {"content": ""}, not {} (openai-SDK users got delta.content None).
TEST(StreamWriter, EveryChatDeltaCarriesItsContent) {
  ServerContext ctx;
  OpenAiRequest r;
  ApiError err;
  ASSERT_TRUE(ParseOpenAiRequest(
      R"({"model":"m","messages":[{"role":"user","content":"x"}],"stream":true})", Endpoint::kChat,
      &r, &err))
      << err.message;
  Delivery d(1);
  StreamWriter writer(ctx, r, ResponseMeta{"chatcmpl-x", 1, "m", 2}, d.state);
  d.Deliver(0, Token(0, 7, "hi"));
  d.Deliver(0, Token(0, 8, ""));  // text held back (a partial character, a possible stop string)
  SequenceUpdate last = Token(0, 2, "");
  last.finish_reason = FinishReason::kStop;
  last.stop_token = 2;
  d.Deliver(0, std::move(last));
  std::string out;
  ASSERT_TRUE(writer.Pump(&out));
  std::vector<nlohmann::ordered_json> deltas;
  for (size_t at = 0; (at = out.find("data: {", at)) != std::string::npos;) {
    const size_t end = out.find("\n\n", at);
    const auto chunk = nlohmann::ordered_json::parse(out.substr(at + 6, end - at - 6));
    deltas.push_back(chunk["choices"][0]["delta"]);
    at = end;
  }
  ASSERT_EQ(deltas.size(), 4u) << out;
  EXPECT_EQ(deltas[0].dump(), R"({"role":"assistant","content":""})");
  EXPECT_EQ(deltas[1].dump(), R"({"content":"hi"})");
  EXPECT_EQ(deltas[2].dump(), R"({"content":""})");
  EXPECT_EQ(deltas[3].dump(), R"({"content":""})") << out;
  EXPECT_NE(out.find(R"("finish_reason":"stop","stop_reason":2)"), std::string::npos) << out;
}

// One Pump took every pending update, several engine steps of them, however much JSON that was;
// a bounded Pump stops after the event that reaches its bound, and the next goes on from there:
// the events, byte for byte, are those one unbounded Pump writes.
TEST(StreamWriter, BoundedPumpsWriteWhatOnePumpWould) {
  ServerContext ctx;  // no tokenizer: log-prob entries read token_id:N
  const OpenAiRequest r =
      Parse(R"({"model":"m","prompt":["a","b"],"n":2,"stream":true,"logprobs":3,)"
            R"("stream_options":{"include_usage":true,"continuous_usage_stats":true}})");
  auto deliver = [](Delivery* d) {
    for (int step = 0; step < 6; ++step) {
      for (size_t i = 0; i < 4; ++i) {
        SequenceUpdate u = Token(static_cast<int64_t>(i), 10 * static_cast<int>(i) + step,
                                 std::string(1, static_cast<char>('a' + step)), 3);
        u.generated_tokens = step + 1;
        if (step == 5) u.finish_reason = FinishReason::kLength;
        d->Deliver(i, std::move(u));
      }
    }
  };
  Delivery whole(4), bounded(4);
  deliver(&whole);
  deliver(&bounded);
  StreamWriter one(ctx, r, ResponseMeta{"cmpl-x", 1, "m", 2}, whole.state);
  StreamWriter many(ctx, r, ResponseMeta{"cmpl-x", 1, "m", 2}, bounded.state);
  std::string want;
  ASSERT_TRUE(one.Pump(&want));
  std::string got;
  int pumps = 0;
  for (bool done = false; !done && pumps < 1000; ++pumps) {
    std::string chunk;
    done = many.Pump(&chunk, 700);
    // Whole events only, and [DONE] in the last Pump alone.
    if (!chunk.empty()) {
      EXPECT_EQ(chunk.compare(chunk.size() - 2, 2, "\n\n"), 0) << chunk;
    }
    EXPECT_EQ(chunk.find("[DONE]") != std::string::npos, done) << chunk;
    got += chunk;
  }
  EXPECT_GT(pumps, 5);
  EXPECT_EQ(got, want);
  EXPECT_EQ(bounded.state->pending_updates, 0u);
  EXPECT_EQ(bounded.state->pending_bytes, 0u);
}

// A stream's chunks with log-probs decode every alternative (with context where a character is
// split over tokens): many pending tokens' worth is built off the I/O thread, as an echo's prompt
// is. Without logprobs a token weighs 1.
TEST(StreamWriter, ManyPendingLogprobTokensAreALargePump) {
  ServerContext ctx;
  const OpenAiRequest lp =
      Parse(R"({"model":"m","prompt":"a","n":16,"stream":true,"logprobs":20})");
  Delivery d(16);
  StreamWriter writer(ctx, lp, ResponseMeta{"cmpl-x", 1, "m", 1}, d.state);
  EXPECT_FALSE(writer.NextPumpIsLarge());
  d.Deliver(0, Token(0, 5, "x", 20));
  EXPECT_FALSE(writer.NextPumpIsLarge());  // one token and its 20 alternatives
  for (size_t i = 1; i < 16; ++i) d.Deliver(i, Token(static_cast<int64_t>(i), 5, "x", 20));
  EXPECT_TRUE(writer.NextPumpIsLarge());  // one engine step of 16 sequences
  std::string out;
  writer.Pump(&out);
  EXPECT_FALSE(writer.NextPumpIsLarge());

  const OpenAiRequest plain = Parse(R"({"model":"m","prompt":"a","n":16,"stream":true})");
  Delivery e(16);
  StreamWriter text_only(ctx, plain, ResponseMeta{"cmpl-y", 1, "m", 1}, e.state);
  for (size_t i = 0; i < 16; ++i) e.Deliver(i, Token(static_cast<int64_t>(i), 5, "x"));
  EXPECT_FALSE(text_only.NextPumpIsLarge());
  for (int step = 0; step < 4; ++step) {
    for (size_t i = 0; i < 16; ++i) e.Deliver(i, Token(static_cast<int64_t>(i), 5, "x"));
  }
  EXPECT_TRUE(text_only.NextPumpIsLarge());  // 80 tokens waiting
}

// What waits for a client that does not read is bounded: past kMaxPendingBytes of updates the
// stream says so (its connection is then closed), and no longer once they are taken.
TEST(StreamWriter, OverrunOnceThePendingUpdatesPassTheBound) {
  ServerContext ctx;
  const OpenAiRequest r = Parse(R"({"model":"m","prompt":"a","stream":true})");
  Delivery d(1);
  StreamWriter writer(ctx, r, ResponseMeta{"cmpl-x", 1, "m", 1}, d.state);
  const std::string text(1 << 20, 'z');
  size_t delivered = 0;
  while (!writer.Overrun()) {
    ASSERT_LE(delivered, StreamWriter::kMaxPendingBytes) << "still no overrun";
    d.Deliver(0, Token(0, 5, text));
    delivered += text.size();
  }
  EXPECT_GT(d.state->pending_bytes, StreamWriter::kMaxPendingBytes);
  for (int i = 0; i < 4; ++i) d.Deliver(0, Token(0, 5, text));
  std::string out;
  EXPECT_FALSE(writer.Pump(&out, 1));  // one event: the others still wait
  EXPECT_TRUE(writer.Overrun());
  EXPECT_FALSE(writer.Pump(&out));
  EXPECT_FALSE(writer.Overrun());
  EXPECT_EQ(d.state->pending_bytes, 0u);
}

}  // namespace
}  // namespace loom::server

namespace loom::server {
namespace {

// Each stream within its own bound, many of them together still held the engine's output for
// slow readers without limit: past kMaxAllPendingBytes for all requests together, a stream more
// than a sixteenth of its bound behind is dropped. The server's count follows every stream's
// pending updates, also those a stream that ends never took.
TEST(StreamWriter, OverrunPastTheServersBoundForAStreamFarBehind) {
  ServerContext ctx;
  const OpenAiRequest r = Parse(R"({"model":"m","prompt":"a","stream":true})");
  std::atomic<size_t> all{0};
  const std::string text(1 << 20, 'z');
  {
    Delivery d(1);
    d.state->all_pending_bytes = &all;
    StreamWriter writer(ctx, r, ResponseMeta{"cmpl-x", 1, "m", 1}, d.state);
    for (int i = 0; i < 5; ++i) d.Deliver(0, Token(0, 5, text));  // 5 MiB behind
    EXPECT_EQ(all.load(), d.state->pending_bytes);
    EXPECT_FALSE(writer.Overrun());
    all += StreamWriter::kMaxAllPendingBytes;  // the other streams' updates
    EXPECT_TRUE(writer.Overrun());
    std::string out;
    EXPECT_FALSE(writer.Pump(&out, 2u << 20));  // the client takes some: 2 MiB behind
    EXPECT_FALSE(writer.Overrun());
    EXPECT_EQ(all.load(), StreamWriter::kMaxAllPendingBytes + d.state->pending_bytes);
    all -= StreamWriter::kMaxAllPendingBytes;
  }
  EXPECT_EQ(all.load(), 0u);  // what it never took left the count with it
}

}  // namespace
}  // namespace loom::server
