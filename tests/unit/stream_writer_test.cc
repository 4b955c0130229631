// SSE stream writing: a choice's failure ends the whole stream, as vLLM's does.
#include "server/openai_response.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "server/generation_state.h"
#include "server/openai_request.h"
#include "server/server_context.h"

namespace loom::server {
namespace {

SequenceUpdate Token(int64_t id, int32_t token, const std::string& text) {
  SequenceUpdate u;
  u.id = id;
  u.has_token = true;
  u.token = token;
  u.text = text;
  return u;
}

// vLLM's stream generators write the error event and then only [DONE]: no usage chunk, no more
// deltas of the request's other choices (loom went on streaming them and sent the usage chunk).
TEST(StreamWriter, AChoicesErrorEndsTheStream) {
  ServerContext ctx;  // no tokenizer: none needed for text already decoded
  OpenAiRequest r;
  ApiError err;
  ASSERT_TRUE(ParseOpenAiRequest(
      R"({"model":"m","prompt":["a","b"],"stream":true,"stream_options":{"include_usage":true}})",
      Endpoint::kCompletions, &r, &err)) << err.message;
  auto state = std::make_shared<GenerationState>();
  state->choices.resize(2);
  state->choices[1].prompt_index = 1;
  state->unfinished = 2;
  StreamWriter writer(ctx, r, ResponseMeta{"cmpl-x", 1, "m", 2}, state);
  state->choices[0].pending.push_back(Token(0, 7, "ok"));
  std::string out;
  EXPECT_FALSE(writer.Pump(&out));
  EXPECT_NE(out.find("\"ok\""), std::string::npos) << out;
  EXPECT_FALSE(writer.failed());

  SequenceUpdate failure;
  failure.id = 1;
  failure.finish_reason = FinishReason::kError;
  failure.error = "sampling step 0: logit of token 3 is NaN";
  state->choices[1].pending.push_back(failure);
  state->choices[1].finished = true;
  --state->unfinished;
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
  state->choices[0].pending.push_back(Token(0, 8, "after"));
  out.clear();
  EXPECT_TRUE(writer.Pump(&out));
  EXPECT_TRUE(out.empty()) << out;
}

}  // namespace
}  // namespace loom::server
