// libFuzzer target for a request body's way to prompt tokens, as the server's handlers run it
// (server/prompt_builder): the body parsed for chat or completions, then the chat template of a
// real model folder rendered over its messages (add_generation_prompt, continue_final_message,
// chat_template_kwargs), text prompts encoded, truncate_prompt_tokens, bad_words, echo. Any
// bytes give a 4xx with a message or prompts whose every id is a token of the tokenizer.
//
// Input: one selector byte (bit 0: chat or completions; bits 1-2: which fixture tokenizer and
// template), then the body. Seeds: corpus/chat_request/.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "server/openai_request.h"
#include "server/prompt_builder.h"
#include "server/server_context.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace {

// The folders' tokenizers and templates, loaded once each (null when a folder fails to load).
loom::server::ServerContext* Context(int which) {
  static const char* const kFolders[4] = {"Qwen2.5-0.5B-Instruct", "Mistral-7B-Instruct-v0.3",
                                          "Phi-3-mini-4k-instruct", "TinyLlama-1.1B-Chat-v1.0"};
  struct Loaded {
    std::unique_ptr<loom::tokenizer::Tokenizer> tok;
    std::unique_ptr<loom::server::ServerContext> ctx;
    bool tried = false;
  };
  static Loaded loaded[4];
  Loaded& l = loaded[which];
  if (!l.tried) {
    l.tried = true;
    const std::string dir = std::string(LOOM_FIXTURES) + "/tokenizers/" + kFolders[which];
    auto tok = loom::tokenizer::Tokenizer::FromModelDir(dir);
    if (!tok.ok()) return nullptr;
    l.tok = std::move(tok).value();
    l.ctx = std::make_unique<loom::server::ServerContext>();
    l.ctx->tokenizer = l.tok.get();
    l.ctx->max_model_len = 4096;
    auto source = loom::LoadChatTemplate(dir, "", false);
    if (source.ok()) {
      auto parsed = loom::ChatTemplate::Parse(*source);
      if (parsed.ok()) l.ctx->chat_template = std::move(parsed).value();
    }
  }
  return l.ctx.get();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1 || size > 16384) return 0;
  using loom::server::Endpoint;
  const Endpoint endpoint = (data[0] & 1) ? Endpoint::kChat : Endpoint::kCompletions;
  loom::server::ServerContext* ctx = Context((data[0] >> 1) & 3);
  if (ctx == nullptr) std::abort();  // the fixtures load
  const std::string body(reinterpret_cast<const char*>(data) + 1, size - 1);
  loom::server::OpenAiRequest r;
  loom::server::ApiError error;
  auto fails_cleanly = [&] {
    if (error.http_status < 400 || error.http_status > 499 || error.message.empty()) std::abort();
    return 0;
  };
  if (!loom::server::ParseOpenAiRequest(body, endpoint, &r, &error)) return fails_cleanly();
  if (!loom::server::EncodeBadWords(*ctx, &r, &error)) return fails_cleanly();
  if (!loom::server::EchoTokenPromptsAsText(*ctx, &r, &error)) return fails_cleanly();
  std::vector<std::vector<int32_t>> prompts;
  if (!loom::server::BuildPrompts(*ctx, r, &prompts, &error)) return fails_cleanly();
  if (!loom::server::TruncatePrompts(*ctx, &r, &prompts, &error)) return fails_cleanly();
  if (prompts.empty()) std::abort();
  const int32_t limit = ctx->tokenizer->id_limit();
  auto in_vocab = [&](const std::vector<int32_t>& ids) {
    for (int32_t id : ids) {
      if (id < 0 || id >= limit) return false;
    }
    return true;
  };
  if (r.has_messages()) {
    if (prompts.size() != 1 || !in_vocab(prompts[0])) std::abort();
  } else {
    if (prompts.size() != r.prompts.size()) std::abort();
    // A text prompt encodes to the tokenizer's ids; token-id prompts are the handler's to check
    // against the model's vocabulary.
    for (size_t i = 0; i < prompts.size(); ++i) {
      if (std::holds_alternative<std::string>(r.prompts[i]) && !in_vocab(prompts[i])) std::abort();
    }
  }
  for (const auto& words : r.params.bad_words_token_ids) {
    for (int32_t id : words) {
      if (id < 0 || id >= limit) std::abort();
    }
  }
  return 0;
}
