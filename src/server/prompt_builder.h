// Request → prompt token ids: the chat template rendered over messages, text prompts tokenized.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "server/api_error.h"
#include "server/openai_request.h"
#include "server/server_context.h"

namespace loom::server {

// The chat prompt as vLLM builds it from r.messages: the template rendered with
// add_generation_prompt; with continue_final_message the text after the final message's
// content is cut off. Fails (400 naming the field) when the folder has no template or it fails.
bool RenderChatPrompt(const ServerContext& ctx, const OpenAiRequest& r, std::string* text,
                      ApiError* error);

// vLLM 0.32's answer to a `developer` message for a template that does not name the role
// (renderers/hf.py _convert_developer_to_system and _consolidate_system_messages; RenderChatPrompt
// calls it when a message's role is "developer" and ChatTemplate::names_developer_role() is
// false): each developer message becomes a system message (its `tools` key dropped); then, when a
// system message is not the first message or there are several, they are merged into one at the
// front, {"role": "system", "content": their non-empty contents joined by "\n\n"} (text parts
// joined by "\n"), the other messages following in their order. `messages` is a list of objects
// with a string `role`.
void ConvertDeveloperToSystem(nlohmann::ordered_json* messages);

// Token ids of every prompt of the request: the rendered chat when it has messages, else each
// text prompt encoded (with r.add_special_tokens) and each token-id prompt as sent. `gone`
// (optional) says the client has left: a large text waiting for the gate stops waiting.
bool BuildPrompts(const ServerContext& ctx, const OpenAiRequest& r,
                  std::vector<std::vector<int32_t>>* prompts, ApiError* error,
                  const std::function<bool()>& gone = nullptr);

// vLLM's truncate_prompt_tokens (k, or -1 for the context length): each prompt longer than k
// keeps its last k tokens (a text prompt its special tokens too, as the tokenizer's truncation in
// vLLM) or, with vLLM's truncation_side, exactly its last ("left") or first ("right") k tokens;
// with echo, a cut prompt becomes its kept ids (echoed as their decoded text). k above the
// context length is a 400 naming the field, as vLLM.
bool TruncatePrompts(const ServerContext& ctx, OpenAiRequest* r,
                     std::vector<std::vector<int32_t>>* prompts, ApiError* error);

// vLLM's bad_words → r->params.bad_words_token_ids: each word, leading whitespace stripped,
// encoded without special tokens, and again after one space when that gives a different first
// token and as many tokens (SamplingParams.update_from_tokenizer). 400 naming `bad_words` when
// the model has no tokenizer.
bool EncodeBadWords(const ServerContext& ctx, OpenAiRequest* r, ApiError* error);

// With echo: each token-id prompt of r is replaced by its text (the tokenizer's decode, special
// tokens kept, as vLLM echoes it) before any work is queued, so the answer can show it. Fails
// with 400 naming `echo` when the model has no tokenizer, `prompt` when the decode runs out of
// the tokenizer's time budget.
bool EchoTokenPromptsAsText(const ServerContext& ctx, OpenAiRequest* r, ApiError* error);

}  // namespace loom::server
