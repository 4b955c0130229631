// vLLM 0.32's request fields: a body vLLM's own request models serialise (every field, most null
// or at their default) is accepted; a value asking for what loom does not do is a 400 naming it.
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "server/openai_request.h"

namespace loom::server {
namespace {

using json = nlohmann::ordered_json;

// CompletionRequest(model="m", prompt="Hello world").model_dump(mode="json") and
// ChatCompletionRequest(model="m", messages=[...]).model_dump(mode="json"), vLLM 0.32.0.
constexpr const char* kCompletionDump = R"({"model": "m", "prompt": "Hello world", "echo": false,
 "frequency_penalty": null, "logit_bias": null, "logprobs": null, "max_tokens": 16, "n": 1,
 "presence_penalty": null, "seed": null, "stop": [], "stream": false, "stream_options": null,
 "suffix": null, "temperature": null, "top_p": null, "user": null, "use_beam_search": false,
 "top_k": null, "min_p": null, "repetition_penalty": null, "watermarking": null,
 "length_penalty": 1.0, "stop_token_ids": [], "include_stop_str_in_output": false,
 "ignore_eos": false, "min_tokens": 0, "skip_special_tokens": true,
 "spaces_between_special_tokens": true, "truncate_prompt_tokens": null, "truncation_side": null,
 "allowed_token_ids": null, "prompt_logprobs": null, "logprob_token_ids": null, "bad_words": [],
 "prompt_embeds": null, "add_special_tokens": true, "response_format": null,
 "structured_outputs": null, "priority": 0, "request_id": "b2d5ca41359e1c46", "session_id": null,
 "return_tokens_as_token_ids": null, "return_token_ids": null, "routed_experts_prompt_start": 0,
 "return_token_offsets": false, "mm_payload": "tensors", "return_mm_kwargs": null,
 "cache_salt": null, "kv_transfer_params": null, "ec_transfer_params": null, "vllm_xargs": null,
 "repetition_detection": null, "thinking_token_budget": null, "stream_interval": null})";

constexpr const char* kChatDump = R"({"messages": [{"content": "hi", "role": "user"}],
 "model": "m", "frequency_penalty": null, "logit_bias": null, "logprobs": false,
 "top_logprobs": 0, "max_tokens": null, "max_completion_tokens": null, "n": 1,
 "presence_penalty": null, "response_format": null, "seed": null, "stop": [], "stream": false,
 "stream_options": null, "temperature": null, "top_p": null, "tools": null, "tool_choice": "none",
 "reasoning_effort": null, "thinking_token_budget": null, "include_reasoning": true,
 "parallel_tool_calls": true, "user": null, "use_beam_search": false, "top_k": null,
 "min_p": null, "repetition_penalty": null, "watermarking": null, "length_penalty": 1.0,
 "stop_token_ids": [], "include_stop_str_in_output": false, "ignore_eos": false,
 "min_tokens": 0, "skip_special_tokens": true, "spaces_between_special_tokens": true,
 "truncate_prompt_tokens": null, "truncation_side": null, "prompt_logprobs": null,
 "logprob_token_ids": null, "allowed_token_ids": null, "bad_words": [], "echo": false,
 "add_generation_prompt": true, "continue_final_message": false, "add_special_tokens": false,
 "documents": null, "chat_template": null, "chat_template_kwargs": null, "media_io_kwargs": null,
 "mm_processor_kwargs": null, "structured_outputs": null, "priority": 0,
 "request_id": "9bbcdd33b6c21f51", "session_id": null, "return_tokens_as_token_ids": null,
 "return_token_ids": null, "routed_experts_prompt_start": 0, "return_token_offsets": false,
 "return_prompt_text": null, "mm_payload": "tensors", "return_mm_kwargs": null,
 "cache_salt": null, "kv_transfer_params": null, "ec_transfer_params": null, "vllm_xargs": null,
 "repetition_detection": null, "stream_interval": null})";

std::string Dump(const char* dump) { return json::parse(dump).dump(); }

bool Parses(const std::string& body, Endpoint e, ApiError* err) {
  OpenAiRequest r;
  return ParseOpenAiRequest(body, e, &r, err);
}

// `dump` with `key` set to `value` (JSON text).
std::string With(const char* dump, const std::string& key, const std::string& value) {
  json j = json::parse(Dump(dump));
  j[key] = json::parse(value);
  return j.dump();
}

TEST(VllmFields, VllmsOwnSerialisedRequestsAreAccepted) {
  ApiError err;
  EXPECT_TRUE(Parses(Dump(kCompletionDump), Endpoint::kCompletions, &err)) << err.message;
  EXPECT_TRUE(Parses(Dump(kChatDump), Endpoint::kChat, &err)) << err.message;
}

// Each field at a value asking for what loom lacks: a 400 naming it, saying so.
TEST(VllmFields, NonDefaultValuesAreRefusedByName) {
  const std::vector<std::pair<std::string, std::string>> both = {
      {"use_beam_search", "true"},
      {"length_penalty", "0.8"},
      {"early_stopping", "true"},
      {"watermarking", "true"},
      {"logprob_token_ids", "[5]"},
      {"structured_outputs", R"({"regex": "a+"})"},
      {"repetition_detection", R"({"max_pattern_size": 4, "min_count": 3})"},
      {"thinking_token_budget", "100"},
      {"stream_interval", "4"},
      {"kv_transfer_params", R"({"do_remote_decode": true})"},
      {"ec_transfer_params", R"({"x": 1})"},
      {"vllm_xargs", R"({"k": 1})"},
      {"logits_processors", R"(["my.Processor"])"},
      {"guided_json", R"({"type": "object"})"},
      {"guided_regex", R"("a+")"},
      {"guided_choice", R"(["a", "b"])"},
      {"guided_grammar", R"("root ::= \"a\"")"},
      {"guided_decoding_backend", R"("xgrammar")"},
      {"guided_whitespace_pattern", R"(" ")"},
      {"structural_tag", R"("{}")"},
  };
  for (const auto& [key, value] : both) {
    for (const auto& [dump, endpoint] : {std::pair{kCompletionDump, Endpoint::kCompletions},
                                         std::pair{kChatDump, Endpoint::kChat}}) {
      ApiError err;
      EXPECT_FALSE(Parses(With(dump, key, value), endpoint, &err)) << key << "=" << value;
      EXPECT_EQ(err.param, key);
      EXPECT_NE(err.message.find("loom does not support"), std::string::npos)
          << key << ": " << err.message;
    }
  }
  const std::vector<std::pair<std::string, std::string>> chat = {
      {"include_reasoning", "false"},         {"documents", R"([{"title": "t", "text": "x"}])"},
      {"mm_processor_kwargs", R"({"a": 1})"}, {"media_io_kwargs", R"({"image": {}})"},
      {"return_prompt_text", "true"},
  };
  for (const auto& [key, value] : chat) {
    ApiError err;
    EXPECT_FALSE(Parses(With(kChatDump, key, value), Endpoint::kChat, &err)) << key;
    EXPECT_EQ(err.param, key);
    EXPECT_NE(err.message.find("loom does not support"), std::string::npos) << err.message;
  }
  ApiError err;
  EXPECT_FALSE(Parses(With(kChatDump, "chat_template", R"("{{ x }}")"), Endpoint::kChat, &err));
  EXPECT_EQ(err.param, "chat_template");
  EXPECT_NE(err.message.find("--trust-request-chat-template"), std::string::npos) << err.message;
  EXPECT_FALSE(
      Parses(With(kCompletionDump, "prompt_embeds", R"(["AAAA"])"), Endpoint::kCompletions, &err));
  EXPECT_EQ(err.param, "prompt_embeds");
  EXPECT_NE(err.message.find("loom does not support"), std::string::npos) << err.message;
  // Fields of one endpoint's model are unknown on the other.
  EXPECT_FALSE(
      Parses(With(kCompletionDump, "include_reasoning", "true"), Endpoint::kCompletions, &err));
  EXPECT_EQ(err.message, "unknown field 'include_reasoning'");
  EXPECT_FALSE(Parses(With(kChatDump, "prompt_embeds", "null"), Endpoint::kChat, &err));
  EXPECT_EQ(err.message, "unknown field 'prompt_embeds'");
}

// The values that ask for nothing, besides null; and those vLLM itself ignores on these routes.
TEST(VllmFields, DefaultsAndIgnoredValuesAreAccepted) {
  const std::vector<std::pair<std::string, std::string>> accepted = {
      {"use_beam_search", "false"},
      {"length_penalty", "1"},
      {"early_stopping", "false"},
      {"watermarking", "false"},
      {"truncation_side", R"("left")"},
      {"truncation_side", R"("right")"},
      {"logprob_token_ids", "[]"},
      {"thinking_token_budget", "-1"},
      {"stream_interval", "1"},
      {"stream_interval", "1.0"},
      {"kv_transfer_params", "{}"},
      {"ec_transfer_params", "{}"},
      {"vllm_xargs", "{}"},
      {"session_id", R"("conversation-7")"},
      {"return_token_offsets", "true"},
      {"mm_payload", R"("none")"},
      {"return_mm_kwargs", "false"},
      {"routed_experts_prompt_start", "3"},
      // Any priority: vLLM's default scheduler (first come first served) ignores it, as loom's.
      {"priority", "10"},
      {"priority", "-3"},
      {"priority", "9223372036854775807"},
      {"priority", "-9223372036854775808"},
      {"priority", "2.0"},
  };
  for (const auto& [key, value] : accepted) {
    for (const auto& [dump, endpoint] : {std::pair{kCompletionDump, Endpoint::kCompletions},
                                         std::pair{kChatDump, Endpoint::kChat}}) {
      ApiError err;
      EXPECT_TRUE(Parses(With(dump, key, value), endpoint, &err))
          << key << "=" << value << ": " << err.message;
    }
  }
  ApiError err;
  EXPECT_TRUE(Parses(With(kCompletionDump, "prompt_embeds", "[]"), Endpoint::kCompletions, &err))
      << err.message;
  for (const auto& [key, value] :
       std::vector<std::pair<std::string, std::string>>{{"mm_processor_kwargs", "{}"},
                                                        {"media_io_kwargs", "{}"},
                                                        {"return_prompt_text", "false"}}) {
    EXPECT_TRUE(Parses(With(kChatDump, key, value), Endpoint::kChat, &err)) << key << err.message;
  }
}

// Values of the wrong type or range: a 400 naming the field, as vLLM's validation.
TEST(VllmFields, MalformedValuesAreRefusedByName) {
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"truncation_side", R"("middle")"},
      {"thinking_token_budget", "-2"},
      {"thinking_token_budget", "1.5"},
      {"thinking_token_budget", "true"},
      {"stream_interval", "0"},
      {"stream_interval", R"("1")"},
      {"session_id", "7"},
      {"return_token_offsets", R"("yes")"},
      {"mm_payload", R"("all")"},
      {"return_mm_kwargs", "1"},
      {"routed_experts_prompt_start", "-1"},
      {"routed_experts_prompt_start", "0.5"},
      {"use_beam_search", "1"},
      {"length_penalty", R"("1")"},
      {"priority", R"("high")"},
      {"priority", "1.5"},
      {"priority", "9223372036854775808"},
  };
  for (const auto& [key, value] : bad) {
    ApiError err;
    EXPECT_FALSE(Parses(With(kCompletionDump, key, value), Endpoint::kCompletions, &err))
        << key << "=" << value;
    EXPECT_EQ(err.param, key) << value;
  }
}

}  // namespace
}  // namespace loom::server
