// vLLM's return_tokens_as_token_ids: log-prob entries name tokens "token_id:N" where vLLM's do
// (completions tokens, top_logprobs keys, an echoed prompt; chat token and top_logprobs), and
// keep the text where vLLM's do (chat's chosen-token bytes, prompt_logprobs' decoded_token).
#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "server/generation_state.h"
#include "server/openai_response.h"
#include "server/server_context.h"

namespace loom::server {
namespace {

using json = nlohmann::ordered_json;

const std::filesystem::path kFixtures = std::filesystem::path(LOOM_FIXTURES);

// gpt2's byte-level BPE: "Hello" " world" "!" ...
constexpr int32_t kHello = 15496, kWorld = 995, kBang = 0, kComma = 11;

struct Fixture {
  std::unique_ptr<tokenizer::Tokenizer> tok;
  ServerContext ctx;
  Fixture() {
    auto t = tokenizer::Tokenizer::FromModelDir((kFixtures / "tokenizers" / "gpt2").string());
    EXPECT_TRUE(t.ok()) << t.status().message();
    tok = std::move(t).value();
    ctx.tokenizer = tok.get();
  }
  std::string Text(int32_t id) const {
    const int32_t one[1] = {id};
    return tok->Decode(std::span<const int32_t>(one, 1), false);
  }
};

OpenAiRequest Parse(const std::string& body, Endpoint e) {
  OpenAiRequest r;
  ApiError err;
  EXPECT_TRUE(ParseOpenAiRequest(body, e, &r, &err)) << err.message;
  return r;
}

// One finished choice that generated kWorld then kBang, each with two alternatives, after the
// prompt {kHello, kComma} whose second token was scored with one alternative.
void OneChoice(GenerationState* state) {
  state->choices.resize(1);
  ChoiceState& c = state->choices[0];
  c.text = " world!";
  c.token_ids = {kWorld, kBang};
  c.logprobs = {{kWorld, -0.5f}, {kBang, -1.0f}};
  c.top = {{{kWorld, -0.5f}, {kComma, -2.0f}}, {{kComma, -0.75f}, {kBang, -1.0f}}};
  c.prompt_logprobs = {{kComma, -3.0f}};
  c.prompt_ranks = {4};
  c.prompt_top = {{{kWorld, -1.5f}}};
  c.finish_reason = FinishReason::kLength;
}

std::string Name(int32_t id) { return "token_id:" + std::to_string(id); }

json Bytes(const std::string& s) {
  json b = json::array();
  for (unsigned char c : s) b.push_back(static_cast<int>(c));
  return b;
}

TEST(TokenIdLogprobs, CompletionsNameEveryTokenByItsId) {
  Fixture f;
  const OpenAiRequest r =
      Parse(R"({"prompt":[15496,11],"logprobs":2,"echo":true,"prompt_logprobs":1,)"
            R"("return_tokens_as_token_ids":true})",
            Endpoint::kCompletions);
  GenerationState state;
  OneChoice(&state);
  const json body =
      BuildFullResponse(f.ctx, r, ResponseMeta{"cmpl-x", 1, "m", 2}, state, {{kHello, kComma}});
  const json& lps = body["choices"][0]["logprobs"];
  // The echoed prompt (its first token unscored), then the generated tokens.
  EXPECT_EQ(lps["tokens"], json::array({Name(kHello), Name(kComma), Name(kWorld), Name(kBang)}));
  EXPECT_TRUE(lps["top_logprobs"][0].is_null());
  EXPECT_EQ(lps["top_logprobs"][2].dump(),
            json({{Name(kWorld), -0.5}, {Name(kComma), -2.0}}).dump());
  EXPECT_EQ(lps["top_logprobs"][3].dump(),
            json({{Name(kBang), -1.0}, {Name(kComma), -0.75}}).dump());
  // text_offset counts the names' characters, as vLLM's (len of each token string).
  EXPECT_EQ(lps["text_offset"], json::array({0, 14, 25, 37})) << lps["text_offset"].dump();
  // prompt_logprobs keep the decoded text (vLLM's Logprob.decoded_token).
  const json& plp = body["choices"][0]["prompt_logprobs"];
  EXPECT_EQ(plp[1][std::to_string(kComma)]["decoded_token"], f.Text(kComma));
  EXPECT_EQ(plp[1][std::to_string(kWorld)]["decoded_token"], f.Text(kWorld));
  // The text itself is not changed.
  EXPECT_EQ(body["choices"][0]["text"], " world!");
}

TEST(TokenIdLogprobs, ChatNamesTokensButKeepsTheChosenTokensBytes) {
  Fixture f;
  const OpenAiRequest r =
      Parse(R"({"messages":[{"role":"user","content":"x"}],"logprobs":true,"top_logprobs":2,)"
            R"("return_tokens_as_token_ids":true})",
            Endpoint::kChat);
  GenerationState state;
  OneChoice(&state);
  const json body =
      BuildFullResponse(f.ctx, r, ResponseMeta{"chatcmpl-x", 1, "m", 2}, state, {{kHello}});
  const json& content = body["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(content.size(), 2u);
  EXPECT_EQ(content[0]["token"], Name(kWorld));
  // As vLLM's _create_chat_logprobs: the chosen token's bytes are its decoded text's, the
  // alternatives' bytes are their names'.
  EXPECT_EQ(content[0]["bytes"], Bytes(f.Text(kWorld)));
  EXPECT_EQ(content[0]["top_logprobs"][0]["token"], Name(kWorld));
  EXPECT_EQ(content[0]["top_logprobs"][0]["bytes"], Bytes(Name(kWorld)));
  EXPECT_EQ(content[0]["top_logprobs"][1]["token"], Name(kComma));
  EXPECT_EQ(content[1]["token"], Name(kBang));
  EXPECT_EQ(content[1]["bytes"], Bytes(f.Text(kBang)));
}

// Unset, the server's --return-tokens-as-token-ids decides; the request's false or true wins.
TEST(TokenIdLogprobs, TheRequestOrElseTheServerFlagDecides) {
  Fixture f;
  auto first_token = [&](const std::string& field) {
    const OpenAiRequest r =
        Parse(R"({"prompt":[15496],"logprobs":1)" + field + "}", Endpoint::kCompletions);
    GenerationState state;
    OneChoice(&state);
    return BuildFullResponse(f.ctx, r, ResponseMeta{"cmpl-x", 1, "m", 1}, state,
                             {{kHello}})["choices"][0]["logprobs"]["tokens"][0];
  };
  EXPECT_EQ(first_token(""), f.Text(kWorld));
  EXPECT_EQ(first_token(R"(,"return_tokens_as_token_ids":null)"), f.Text(kWorld));
  EXPECT_EQ(first_token(R"(,"return_tokens_as_token_ids":false)"), f.Text(kWorld));
  EXPECT_EQ(first_token(R"(,"return_tokens_as_token_ids":true)"), Name(kWorld));
  f.ctx.options.return_tokens_as_token_ids = true;
  EXPECT_EQ(first_token(""), Name(kWorld));
  EXPECT_EQ(first_token(R"(,"return_tokens_as_token_ids":false)"), f.Text(kWorld));
}

TEST(TokenIdLogprobs, TheFieldIsABoolean) {
  for (const char* bad : {"1", R"("yes")", "[]"}) {
    OpenAiRequest r;
    ApiError err;
    EXPECT_FALSE(ParseOpenAiRequest(
        std::string(R"({"prompt":"x","return_tokens_as_token_ids":)") + bad + "}",
        Endpoint::kCompletions, &r, &err));
    EXPECT_EQ(err.param, "return_tokens_as_token_ids");
  }
}

}  // namespace
}  // namespace loom::server
