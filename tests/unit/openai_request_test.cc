// OpenAI request parsing: every field honoured, accepted without effect, or rejected by name.
#include "server/openai_request.h"

#include <gtest/gtest.h>

#include <tuple>
#include <utility>
#include <vector>

namespace loom::server {
namespace {

ApiError Reject(const std::string& body, Endpoint e = Endpoint::kCompletions) {
  OpenAiRequest r;
  ApiError err;
  EXPECT_FALSE(ParseOpenAiRequest(body, e, &r, &err)) << body;
  return err;
}

TEST(OpenAiRequest, ParsesCompletionFields) {
  OpenAiRequest r;
  ApiError err;
  ASSERT_TRUE(ParseOpenAiRequest(
      R"({"model":"m","prompt":[1,2,3],"max_tokens":7,"temperature":0.5,"top_p":0.9,"top_k":5,
          "min_p":0.1,"seed":-3,"n":2,"best_of":2,"stop":["a","b"],"stop_token_ids":[4],
          "logprobs":3,"presence_penalty":0.5,"frequency_penalty":-0.5,"repetition_penalty":1.1,
          "ignore_eos":true,"user":"u","stream":true,"stream_options":{"include_usage":true}})",
      Endpoint::kCompletions, &r, &err))
      << err.message;
  EXPECT_EQ(r.model, "m");
  ASSERT_EQ(r.prompts.size(), 1u);
  EXPECT_EQ(std::get<std::vector<int32_t>>(r.prompts[0]), (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(r.params.max_tokens, 7);
  EXPECT_FLOAT_EQ(r.params.temperature, 0.5f);
  EXPECT_EQ(r.params.top_k, 5);
  EXPECT_EQ(*r.params.seed, static_cast<uint64_t>(-3));
  EXPECT_EQ(r.n, 2);
  EXPECT_EQ(r.stop, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(r.logprobs, 3);
  EXPECT_TRUE(r.want_logprobs);
  EXPECT_TRUE(r.params.ignore_eos);
  EXPECT_TRUE(r.stream && r.include_usage);
  EXPECT_TRUE(r.add_special_tokens);
}

TEST(OpenAiRequest, ParsesChatFields) {
  OpenAiRequest r;
  ApiError err;
  ASSERT_TRUE(ParseOpenAiRequest(
      R"({"model":"m","messages":[{"role":"user","content":"hi"}],"max_completion_tokens":3,
          "logprobs":true,"top_logprobs":2,"chat_template_kwargs":{"enable_thinking":false},
          "response_format":{"type":"text"},"tools":[],"tool_choice":"none"})",
      Endpoint::kChat, &r, &err))
      << err.message;
  EXPECT_EQ(r.params.max_tokens, 3);
  EXPECT_TRUE(r.max_tokens_given);
  EXPECT_EQ(r.logprobs, 2);
  EXPECT_FALSE(r.add_special_tokens);
  EXPECT_TRUE(r.chat_template_kwargs.is_object());
}

// vLLM takes `max_completion_tokens or max_tokens`: the former wins in either key order, and
// later errors name it.
TEST(OpenAiRequest, MaxCompletionTokensWinsOverMaxTokensInAnyOrder) {
  for (const char* body :
       {R"({"model":"m","messages":[{"role":"user","content":"hi"}],"max_completion_tokens":5,"max_tokens":3})",
        R"({"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":3,"max_completion_tokens":5})"}) {
    OpenAiRequest r;
    ApiError err;
    ASSERT_TRUE(ParseOpenAiRequest(body, Endpoint::kChat, &r, &err)) << err.message;
    EXPECT_EQ(r.params.max_tokens, 5) << body;
    EXPECT_EQ(r.max_tokens_field, "max_completion_tokens") << body;
  }
}

// SPEC-api: temperature ≤ 0 is greedy, so a negative one is taken (vLLM refuses it).
TEST(OpenAiRequest, NegativeTemperatureIsTaken) {
  OpenAiRequest r;
  ApiError err;
  for (const char* t : {"-2.5", "-1e39", "-1e308", "-0.0"}) {
    ASSERT_TRUE(ParseOpenAiRequest(std::string(R"({"model":"m","prompt":"x","temperature":)") + t + "}",
                                   Endpoint::kCompletions, &r, &err))
        << t << ": " << err.message;
    EXPECT_EQ(r.params.temperature, 0.0f) << t;  // greedy
  }
}

TEST(OpenAiRequest, RejectsNamingTheField) {
  EXPECT_EQ(Reject(R"({"model":"m","prompt":"x","bogus":1})").param, "bogus");
  EXPECT_EQ(Reject(R"({"model":"m","prompt":"x","max_tokens":-1})").param, "max_tokens");
  EXPECT_EQ(Reject(R"({"model":"m","prompt":"x","max_tokens":"x"})").param, "max_tokens");
  EXPECT_EQ(Reject(R"({"model":"m","prompt":"x","max_tokens":4294967297})").param, "max_tokens");
  EXPECT_EQ(Reject(R"({"model":"m","prompt":"x","temperature":100.5})").param, "temperature");
  EXPECT_EQ(Reject(R"({"model":"m","prompt":"x","temperature":1e300})").param, "temperature");
  EXPECT_EQ(Reject(R"({"model":"m","prompt":"x","temperature":"0"})").param, "temperature");
  EXPECT_EQ(Reject(R"({"model":"m","prompt":"x","top_p":2})").param, "top_p");
  EXPECT_EQ(Reject(R"({"model":"m","prompt":"x","top_p":0})").param, "top_p");
  // Below float's range: 0 once stored as a float, refused as 0 is.
  EXPECT_EQ(Reject(R"({"model":"m","prompt":"x","top_p":1e-50})").param, "top_p");
  EXPECT_EQ(Reject(R"({"model":"m","prompt":"x","repetition_penalty":1e-50})").param, "repetition_penalty");
  EXPECT_EQ(Reject(R"({"model":"m","prompt":"x","n":0})").param, "n");
  // Echo alone (max_tokens 0) runs one token inside: min_tokens is checked against the 0 asked.
  const ApiError echo_min =
      Reject(R"({"model":"m","prompt":"x","max_tokens":0,"echo":true,"min_tokens":2})");
  EXPECT_EQ(echo_min.param, "min_tokens");
  EXPECT_NE(echo_min.message.find("max_tokens = 0], got 2"), std::string::npos) << echo_min.message;
  // An integer past int64 (parsed as a double): out of range, not "must be an integer".
  const ApiError seed = Reject(R"({"model":"m","prompt":"x","seed":18446744073709551616})");
  EXPECT_EQ(seed.param, "seed");
  EXPECT_NE(seed.message.find("seed must be in ["), std::string::npos) << seed.message;
  EXPECT_NE(Reject(R"({"model":"m","prompt":"x","seed":1.5})").message.find("must be an integer"),
            std::string::npos);
  EXPECT_EQ(Reject(R"({"model":"m","prompt":"x","logprobs":21})").param, "logprobs");
  EXPECT_EQ(Reject(R"({"model":"m","prompt":"x","stop":123})").param, "stop");
  EXPECT_EQ(Reject(R"({"model":"m","prompt":[]})").param, "prompt");
  EXPECT_EQ(Reject(R"({"model":"m","prompt":[1,4294967297]})").param, "prompt");
  EXPECT_EQ(Reject(R"({"model":"m","prompt":[1,-2]})").param, "prompt");
  EXPECT_EQ(Reject(R"({"model":"m","prompt":"x","stream":"yes"})").param, "stream");
  for (const char* bad : {R"([1])", R"({"x":1})", R"({"-1":1})", R"({" 5":1})", R"({"5":"1"})",
                          R"({"5":null})", R"({"99999999999":1})", R"({"":1})", R"("5")"}) {
    EXPECT_EQ(Reject(std::string(R"({"model":"m","prompt":"x","logit_bias":)") + bad + "}").param,
              "logit_bias")
        << bad;
  }
  EXPECT_EQ(Reject(R"({"model":"m","prompt":"x","best_of":3})").param, "best_of");
  EXPECT_EQ(Reject(R"({"model":"m","prompt":"x","suffix":"s"})").param, "suffix");
  EXPECT_EQ(Reject(R"({"model":"m","prompt":"x","stream_options":{"x":1}})").param,
            "stream_options.x");
  // As vLLM: stream_options without stream=true, even asking for nothing (review finding).
  EXPECT_EQ(Reject(R"({"model":"m","prompt":"x","stream_options":{"include_usage":false}})").param,
            "stream_options");
  {
    OpenAiRequest r;
    ApiError err;
    EXPECT_TRUE(ParseOpenAiRequest(R"({"model":"m","prompt":"x","stream_options":{}})",
                                   Endpoint::kCompletions, &r, &err));
    // vLLM 0.32's StreamOptions: include_usage defaults to false, null is false (the stream
    // writes continuous usage only with include_usage).
    for (const auto& [opts, usage, continuous] : std::vector<std::tuple<std::string, bool, bool>>{
             {"{}", false, false},
             {R"({"continuous_usage_stats":true})", false, true},
             {R"({"include_usage":true})", true, false},
             {R"({"include_usage":false,"continuous_usage_stats":true})", false, true},
             {R"({"include_usage":null})", false, false}}) {
      ASSERT_TRUE(ParseOpenAiRequest(
          R"({"model":"m","prompt":"x","stream":true,"stream_options":)" + opts + "}",
          Endpoint::kCompletions, &r, &err))
          << opts;
      EXPECT_EQ(r.include_usage, usage) << opts;
      EXPECT_EQ(r.continuous_usage_stats, continuous) << opts;
    }
    // min_tokens 0 as an integral float, as the other integer fields (review finding).
    EXPECT_TRUE(ParseOpenAiRequest(R"({"model":"m","prompt":"x","min_tokens":0.0})",
                                   Endpoint::kCompletions, &r, &err));
  }
  EXPECT_EQ(Reject(R"({"model":"m","prompt":"x","min_tokens":0.5})").param, "min_tokens");
  EXPECT_EQ(Reject(R"({"model":"m","prompt":"x","min_tokens":-1})").param, "min_tokens");
  {
    // logit_bias: token ids as strings, biases clamped to [-100, 100] (as vLLM), a repeated
    // token keeps its last bias, sorted by token; min_tokens an integer.
    OpenAiRequest r;
    ApiError err;
    ASSERT_TRUE(ParseOpenAiRequest(
        R"({"model":"m","messages":[{"role":"user","content":"x"}],"min_tokens":4,)"
        R"("logit_bias":{"7":-250,"3":0.5,"7":12,"0":1e3}})",
        Endpoint::kChat, &r, &err))
        << err.message;
    EXPECT_EQ(r.params.min_tokens, 4);
    const std::vector<std::pair<int32_t, float>> want = {{0, 100.0f}, {3, 0.5f}, {7, 12.0f}};
    EXPECT_EQ(r.params.logit_bias, want);
  }
  {
    // vLLM's allowed_token_ids (sorted, unique), bad_words (kept as sent: the handler encodes
    // them) and truncate_prompt_tokens (-1 or ≥ 1).
    OpenAiRequest r;
    ApiError err;
    ASSERT_TRUE(ParseOpenAiRequest(
        R"({"model":"m","prompt":"x","allowed_token_ids":[9,2,9,0],"bad_words":[" a b","c"],)"
        R"("truncate_prompt_tokens":-1})",
        Endpoint::kCompletions, &r, &err))
        << err.message;
    ASSERT_NE(r.params.allowed_token_ids, nullptr);
    EXPECT_EQ(*r.params.allowed_token_ids, (std::vector<int32_t>{0, 2, 9}));
    EXPECT_EQ(r.bad_words, (std::vector<std::string>{" a b", "c"}));
    EXPECT_EQ(r.truncate_prompt_tokens, -1);
    // Integral floats as the other integer fields (review finding).
    ASSERT_TRUE(ParseOpenAiRequest(R"({"model":"m","prompt":"x","allowed_token_ids":[65.0]})",
                                   Endpoint::kCompletions, &r, &err))
        << err.message;
    EXPECT_EQ(*r.params.allowed_token_ids, (std::vector<int32_t>{65}));
  }
  for (const char* bad : {"[]", "[-1]", "[1.5]", R"(["1"])", "[4294967297]", "7", "{}"}) {
    EXPECT_EQ(
        Reject(std::string(R"({"model":"m","prompt":"x","allowed_token_ids":)") + bad + "}").param,
        "allowed_token_ids")
        << bad;
  }
  for (const char* bad : {R"("x")", "[1]", R"([""])", R"([" \t"])", R"(["\u3000"])", "{}"}) {
    EXPECT_EQ(Reject(std::string(R"({"model":"m","prompt":"x","bad_words":)") + bad + "}").param,
              "bad_words")
        << bad;
  }
  for (const char* bad : {"0", "-2", "1.5", R"("4")", "true"}) {
    EXPECT_EQ(
        Reject(std::string(R"({"model":"m","prompt":"x","truncate_prompt_tokens":)") + bad + "}")
            .param,
        "truncate_prompt_tokens")
        << bad;
  }
  {
    // max_tokens 0 with echo: the prompt alone (one token runs); without echo it is refused.
    OpenAiRequest r;
    ApiError err;
    ASSERT_TRUE(ParseOpenAiRequest(R"({"model":"m","max_tokens":0,"prompt":"x","echo":true})",
                                   Endpoint::kCompletions, &r, &err))
        << err.message;
    EXPECT_TRUE(r.echo_only);
    EXPECT_EQ(r.params.max_tokens, 1);
  }
  EXPECT_EQ(Reject(R"({"model":"m","prompt":"x","max_tokens":0})").param, "max_tokens");
  EXPECT_EQ(Reject(R"({"model":"m","prompt":"x","max_tokens":0,"echo":false})").param,
            "max_tokens");
  EXPECT_EQ(Reject(R"({"model":"m","messages":[{"role":"user","content":"x"}],"max_tokens":0,)"
                   R"("echo":true})",
                   Endpoint::kChat)
                .param,
            "max_tokens");
  {
    // logit_bias entries × sequences is bounded per request (each sequence holds a copy).
    OpenAiRequest r;
    ApiError err;
    r.params.logit_bias.assign(150000, {1, 1.0f});
    EXPECT_TRUE(CheckLogitBiasBudget(r, 16, &err));
    EXPECT_FALSE(CheckLogitBiasBudget(r, 1024, &err));
    EXPECT_EQ(err.param, "logit_bias");
    EXPECT_NE(err.message.find("1024 sequences"), std::string::npos) << err.message;
  }
  {
    // Prompt log-prob entries (prompt tokens × n × (top-N + 1)) are bounded per request, more
    // tightly when streamed; the error names the field that asked for them.
    const std::vector<std::vector<int32_t>> prompts(4, std::vector<int32_t>(1 << 14, 5));  // 2^16 tokens
    ApiError err;
    OpenAiRequest r;
    r.n = 1;
    EXPECT_TRUE(CheckPromptLogprobBudget(r, prompts, &err));  // nothing asks for prompt log-probs
    r.prompt_logprobs = 15;  // 2^16 · 16 = 2^20 entries: the limit itself
    EXPECT_TRUE(CheckPromptLogprobBudget(r, prompts, &err));
    r.n = 2;
    EXPECT_FALSE(CheckPromptLogprobBudget(r, prompts, &err));
    EXPECT_EQ(err.param, "prompt_logprobs");
    EXPECT_NE(err.message.find("2097152"), std::string::npos) << err.message;
    OpenAiRequest e;  // echo with logprobs scores the prompt too; streamed, 2^18 at most
    e.echo = e.want_logprobs = e.stream = true;
    e.logprobs = 3;  // 2^16 · 4 = 2^18
    EXPECT_TRUE(CheckPromptLogprobBudget(e, prompts, &err));
    e.logprobs = 4;
    EXPECT_FALSE(CheckPromptLogprobBudget(e, prompts, &err));
    EXPECT_EQ(err.param, "logprobs");
    EXPECT_NE(err.message.find("stream"), std::string::npos) << err.message;
    e.stream = false;
    EXPECT_TRUE(CheckPromptLogprobBudget(e, prompts, &err));
    e.echo = false;  // logprobs without echo: the generated tokens only, never refused here
    e.logprobs = 20;
    e.n = 16;
    EXPECT_TRUE(CheckPromptLogprobBudget(e, prompts, &err));
  }
  EXPECT_EQ(Reject(R"({"model":7,"prompt":"x"})").param, "model");
  // No model (or null, or "") is the base, as vLLM: the handler fills in the served name.
  for (const char* body : {R"({"prompt":"x","model":null})", R"({"prompt":"x","model":""})"}) {
    for (const Endpoint e : {Endpoint::kCompletions, Endpoint::kTokenize}) {
      OpenAiRequest r;
      ApiError err;
      ASSERT_TRUE(ParseOpenAiRequest(body, e, &r, &err)) << body << ": " << err.message;
      EXPECT_TRUE(r.model.empty()) << body;
    }
  }
  EXPECT_EQ(Reject(R"({"model":"m"})").param, "prompt");
  EXPECT_EQ(Reject(R"({"model":"m","messages":[]})", Endpoint::kChat).param, "messages");
  EXPECT_EQ(Reject(R"({"model":"m","messages":[{"content":"x"}]})", Endpoint::kChat).param,
            "messages[0].role");
  EXPECT_EQ(Reject(R"({"model":"m","messages":[{"role":"user","content":"x"}],"tools":[{}]})",
                   Endpoint::kChat).param, "tools");
  EXPECT_EQ(Reject(R"({"model":"m","messages":[{"role":"user","content":"x"}],
                       "response_format":{"type":"json_object"}})", Endpoint::kChat).param,
            "response_format");
  EXPECT_EQ(Reject(R"({"model":"m","messages":[{"role":"user","content":"x"}],"top_logprobs":2})",
                   Endpoint::kChat).param, "top_logprobs");
  // A completions-only field on chat is unknown there.
  EXPECT_EQ(Reject(R"({"model":"m","messages":[{"role":"user","content":"x"}],"suffix":"y"})",
                   Endpoint::kChat).param, "suffix");
  // Chat's own echo (vLLM's: the last message leads the answer) is a boolean.
  EXPECT_EQ(Reject(R"({"model":"m","messages":[{"role":"user","content":"x"}],"echo":1})",
                   Endpoint::kChat).param, "echo");
}

// vLLM's /tokenize: {"prompt": text} adds special tokens by default, the chat form does not;
// model is optional (the base); only the fields of the form sent are accepted.
TEST(OpenAiRequest, ParsesTokenizeForms) {
  OpenAiRequest r;
  ApiError err;
  ASSERT_TRUE(ParseOpenAiRequest(R"({"prompt":"hi","return_token_strs":true})", Endpoint::kTokenize,
                                 &r, &err))
      << err.message;
  EXPECT_TRUE(r.model.empty());
  ASSERT_EQ(r.prompts.size(), 1u);
  EXPECT_EQ(std::get<std::string>(r.prompts[0]), "hi");
  EXPECT_TRUE(r.add_special_tokens);
  EXPECT_TRUE(r.return_token_strs);
  EXPECT_FALSE(r.has_messages());

  ASSERT_TRUE(ParseOpenAiRequest(R"({"model":"a","prompt":"hi","add_special_tokens":false})",
                                 Endpoint::kTokenize, &r, &err))
      << err.message;
  EXPECT_FALSE(r.add_special_tokens);
  EXPECT_EQ(r.model, "a");

  ASSERT_TRUE(ParseOpenAiRequest(R"({"messages":[{"role":"user","content":"x"}],
                                     "chat_template_kwargs":{"add_generation_prompt":false}})",
                                 Endpoint::kTokenize, &r, &err))
      << err.message;
  EXPECT_TRUE(r.has_messages());
  EXPECT_FALSE(r.add_special_tokens);
  EXPECT_TRUE(r.add_generation_prompt);  // the request's field wins (vLLM 0.32), as in chat
  EXPECT_FALSE(r.chat_template_kwargs.contains("add_generation_prompt"));
  EXPECT_FALSE(r.return_token_strs);

  ASSERT_TRUE(ParseOpenAiRequest(R"({"messages":[{"role":"assistant","content":"x"}],
                                     "add_generation_prompt":false,"continue_final_message":true,
                                     "add_special_tokens":true})",
                                 Endpoint::kTokenize, &r, &err))
      << err.message;
  EXPECT_TRUE(r.continue_final_message && r.add_special_tokens);
}

TEST(OpenAiRequest, RejectsTokenizeFieldsByName) {
  const auto tok = Endpoint::kTokenize;
  EXPECT_EQ(Reject(R"({"model":"m"})", tok).param, "prompt");
  EXPECT_EQ(Reject(R"({"prompt":"a","messages":[{"role":"user","content":"x"}]})", tok).param,
            "messages");
  EXPECT_EQ(Reject(R"({"prompt":[1,2]})", tok).param, "prompt");
  EXPECT_EQ(Reject(R"({"prompt":"a","add_generation_prompt":true})", tok).param,
            "add_generation_prompt");
  EXPECT_EQ(Reject(R"({"prompt":"a","chat_template_kwargs":{}})", tok).param,
            "chat_template_kwargs");
  EXPECT_EQ(Reject(R"({"prompt":"a","max_tokens":3})", tok).param,
            "max_tokens");  // not a generation
  EXPECT_EQ(Reject(R"({"prompt":"a","temperature":0})", tok).param, "temperature");
  EXPECT_EQ(Reject(R"({"prompt":"a","n":2})", tok).param, "n");
  EXPECT_EQ(Reject(R"({"prompt":"a","return_token_strs":"yes"})", tok).param, "return_token_strs");
  EXPECT_EQ(Reject(R"({"prompt":"a","model":[]})", tok).param, "model");
  EXPECT_EQ(Reject(R"({"messages":[{"role":"user","content":"x"}],"tools":[{}]})", tok).param,
            "tools");
  EXPECT_EQ(Reject(R"({"messages":[{"role":"user","content":"x"}],"add_generation_prompt":true,
                       "continue_final_message":true})",
                   tok)
                .param,
            "continue_final_message");
  EXPECT_EQ(Reject(R"({"messages":[{"role":"user"}],"bogus":1})", tok).param, "bogus");
}

TEST(OpenAiRequest, ParsesDetokenize) {
  OpenAiRequest r;
  ApiError err;
  ASSERT_TRUE(ParseOpenAiRequest(R"({"tokens":[3,0,7]})", Endpoint::kDetokenize, &r, &err))
      << err.message;
  EXPECT_EQ(r.tokens, (std::vector<int32_t>{3, 0, 7}));
  ASSERT_TRUE(ParseOpenAiRequest(R"({"model":"m","tokens":[]})", Endpoint::kDetokenize, &r, &err));
  EXPECT_TRUE(r.tokens.empty());
  const auto detok = Endpoint::kDetokenize;
  EXPECT_EQ(Reject(R"({"model":"m"})", detok).param, "tokens");
  EXPECT_EQ(Reject(R"({"tokens":[-1]})", detok).param, "tokens");
  EXPECT_EQ(Reject(R"({"tokens":[1.5]})", detok).param, "tokens");
  EXPECT_EQ(Reject(R"({"tokens":"12"})", detok).param, "tokens");
  EXPECT_EQ(Reject(R"({"tokens":[4294967296]})", detok).param, "tokens");
  EXPECT_EQ(Reject(R"({"tokens":[1],"prompt":"a"})", detok).param, "prompt");
}

TEST(OpenAiRequest, RejectsMalformedBodies) {
  EXPECT_EQ(Reject("").http_status, 400);
  EXPECT_EQ(Reject("[1,2]").http_status, 400);
  EXPECT_EQ(Reject("{\"model\": \"m\", \"prompt\": \"\xff\xfe\"}").http_status, 400);
  std::string deep(100000, '[');
  EXPECT_NE(Reject(deep).message.find("nested deeper"), std::string::npos);
  // Brackets inside strings do not count.
  OpenAiRequest r;
  ApiError err;
  EXPECT_TRUE(ParseOpenAiRequest(R"({"model":"m","prompt":"[[[[[[[[[[[[[[[[[[[["})",
                                 Endpoint::kCompletions, &r, &err, 2)) << err.message;
}

// As vLLM: prompt_logprobs 0 with stream is accepted with no effect (a stream carries none),
// more is refused with vLLM's message.
TEST(OpenAiRequest, PromptLogprobsWithStreamAsVllm) {
  OpenAiRequest r;
  ApiError err;
  ASSERT_TRUE(ParseOpenAiRequest(R"({"model":"m","prompt":"a","stream":true,"prompt_logprobs":0})",
                                 Endpoint::kCompletions, &r, &err)) << err.message;
  EXPECT_EQ(r.prompt_logprobs, -1);
  ASSERT_TRUE(ParseOpenAiRequest(R"({"model":"m","prompt":"a","prompt_logprobs":0})",
                                 Endpoint::kCompletions, &r, &err)) << err.message;
  EXPECT_EQ(r.prompt_logprobs, 0);
  const ApiError e = Reject(R"({"model":"m","prompt":"a","stream":true,"prompt_logprobs":1})");
  EXPECT_EQ(e.param, "prompt_logprobs");
  EXPECT_EQ(e.message, "`prompt_logprobs` are not available when `stream=True`.");
}

// metadata's limits count characters, as OpenAI's (they counted bytes: a 40-character key in
// Cyrillic or CJK was refused).
TEST(OpenAiRequest, MetadataLimitsCountCharacters) {
  auto body = [](const std::string& key, const std::string& value) {
    return R"({"model":"m","messages":[{"role":"user","content":"x"}],"metadata":{")" + key +
           R"(":")" + value + R"("}})";
  };
  std::string key64, key65, value512, value513;
  for (int i = 0; i < 64; ++i) key64 += "\u00e9";       // é: 2 bytes each
  key65 = key64 + "e";
  for (int i = 0; i < 512; ++i) value512 += "\u65e5";  // 日: 3 bytes each
  value513 = value512 + "x";
  OpenAiRequest r;
  ApiError err;
  EXPECT_TRUE(ParseOpenAiRequest(body(key64, value512), Endpoint::kChat, &r, &err)) << err.message;
  EXPECT_EQ(Reject(body(key65, "v"), Endpoint::kChat).param, "metadata");
  EXPECT_EQ(Reject(body("k", value513), Endpoint::kChat).param, "metadata");
}

// Completions take what chat takes of OpenAI's storage fields (no effect, the same checks) and
// response_format as plain text (vLLM's CompletionRequest has it; vLLM ignores the others).
TEST(OpenAiRequest, CompletionsTakeChatsStorageFieldsAndTextResponseFormat) {
  OpenAiRequest r;
  ApiError err;
  EXPECT_TRUE(ParseOpenAiRequest(
      R"({"model":"m","prompt":"x","response_format":{"type":"text"},"metadata":{"k":"v"},)"
      R"("store":false,"service_tier":"auto"})",
      Endpoint::kCompletions, &r, &err))
      << err.message;
  EXPECT_TRUE(ParseOpenAiRequest(
      R"({"model":"m","prompt":"x","response_format":null,"metadata":null,"store":null,)"
      R"("service_tier":null})",
      Endpoint::kCompletions, &r, &err))
      << err.message;
  for (const auto& [field, value] : std::vector<std::pair<std::string, std::string>>{
           {"response_format", R"({"type":"json_object"})"},
           {"response_format", R"({"type":"json_schema","json_schema":{"name":"x"}})"},
           {"response_format", R"({"type":"structural_tag","format":{}})"},
           {"response_format", R"("text")"},
           {"metadata", R"({"k":1})"},
           {"metadata", "[]"},
           {"store", R"("yes")"},
           {"service_tier", R"("fast")"}}) {
    EXPECT_EQ(Reject(R"({"model":"m","prompt":"x",")" + field + "\":" + value + "}").param, field)
        << value;
  }
}

// vLLM 0.32's validate_cache_salt: a non-empty string of at most 128 characters (not bytes)
// without '@', '/', '\\' or NUL; null is none.
TEST(OpenAiRequest, CacheSaltIsCheckedAsVllm) {
  OpenAiRequest r;
  ApiError err;
  std::string salt128;
  for (int i = 0; i < 128; ++i) salt128 += "\u00e9";  // é: 2 bytes each, 256 bytes
  for (const std::string& salt : {std::string("tenant-7"), salt128, std::string("a b+c=d")}) {
    for (const Endpoint e : {Endpoint::kCompletions, Endpoint::kChat}) {
      const std::string prompt = e == Endpoint::kChat
                                     ? R"("messages":[{"role":"user","content":"x"}])"
                                     : R"("prompt":"x")";
      ASSERT_TRUE(
          ParseOpenAiRequest("{" + prompt + R"(,"cache_salt":")" + salt + "\"}", e, &r, &err))
          << salt << ": " << err.message;
      EXPECT_EQ(r.cache_salt, salt);
    }
  }
  ASSERT_TRUE(
      ParseOpenAiRequest(R"({"prompt":"x","cache_salt":null})", Endpoint::kCompletions, &r, &err));
  EXPECT_EQ(r.cache_salt, "");
  for (const std::string& bad :
       {std::string(R"("")"), std::string("7"), std::string(R"(["a"])"), std::string(R"("a@b")"),
        std::string(R"("a/b")"), std::string(R"("a\\b")"), std::string(R"("a\u0000b")"),
        "\"" + salt128 + "e\""}) {
    const ApiError e = Reject(R"({"prompt":"x","cache_salt":)" + bad + "}");
    EXPECT_EQ(e.param, "cache_salt") << bad;
    EXPECT_EQ(e.message.rfind("Parameter 'cache_salt' must be", 0), 0u) << e.message;
  }
}

// vLLM 0.32 refuses n > 1 with greedy sampling (temperature below 1e-5, negative ones too, seed
// or not): the choices would all be one.
TEST(OpenAiRequest, SeveralGreedyChoicesAreRefusedNamingN) {
  auto check = [](const std::string& body) {
    OpenAiRequest r;
    ApiError err;
    EXPECT_TRUE(ParseOpenAiRequest(body, Endpoint::kCompletions, &r, &err)) << err.message;
    const bool ok = CheckGreedyChoices(r, &err);
    return ok ? std::string() : err.param + ": " + err.message;
  };
  const std::string refused = "n: n must be 1 when using greedy sampling, got 2.";
  EXPECT_EQ(check(R"({"prompt":"x","n":2,"temperature":0})"), refused);
  EXPECT_EQ(check(R"({"prompt":"x","n":2,"temperature":1e-6})"), refused);
  EXPECT_EQ(check(R"({"prompt":"x","n":2,"temperature":-1})"), refused);
  EXPECT_EQ(check(R"({"prompt":"x","n":2,"temperature":0,"seed":7})"), refused);
  EXPECT_EQ(check(R"({"prompt":"x","n":2,"temperature":0,"best_of":2})"), refused);
  EXPECT_EQ(check(R"({"prompt":"x","n":16,"temperature":0})"),
            "n: n must be 1 when using greedy sampling, got 16.");
  EXPECT_EQ(check(R"({"prompt":"x","n":1,"temperature":0})"), "");
  EXPECT_EQ(check(R"({"prompt":"x","n":2,"temperature":1e-5})"), "");
  EXPECT_EQ(check(R"({"prompt":"x","n":2})"), "");  // the default temperature, 1
  EXPECT_EQ(check(R"({"prompt":"x","n":2,"temperature":0.7,"top_k":1})"), "");
}

}  // namespace
}  // namespace loom::server
