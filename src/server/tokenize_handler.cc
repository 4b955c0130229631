// vLLM's /tokenize and /detokenize: a prompt (text or a chat) to token ids, token ids to text.
#include "server/tokenize_handler.h"

#include <nlohmann/json.hpp>

#include "server/openai_request.h"
#include "server/prompt_builder.h"

namespace loom::server {

using json = nlohmann::ordered_json;

namespace {

HttpResponse JsonReply(const json& body) {
  HttpResponse r;
  r.content_type = "application/json";
  r.body = body.dump(-1, ' ', false, json::error_handler_t::replace);
  return r;
}

// The model a request names: the base when it names none, or an adapter (loaded on demand
// from --lora-dir as for a completion, so a name both routes accept is the same set).
bool CheckModel(ServerContext& ctx, const std::string& model, ApiError* error) {
  const std::string& base =
      ctx.options.merged_adapter.empty() ? ctx.options.served_model_name : ctx.options.merged_adapter;
  if (model.empty() || model == base) return true;
  if (ctx.adapters != nullptr) {
    auto lease = ctx.adapters->Acquire(model);
    if (lease.ok()) return true;
    if (lease.status().code() != StatusCode::kNotFound) {
      *error = FromStatus(lease.status(), "model");
      return false;
    }
  }
  *error = ApiError{404, "the model '" + model + "' does not exist", "model", ""};
  return false;
}

}  // namespace

HttpResponse HandleTokenize(ServerContext& ctx, const HttpRequest& req) {
  OpenAiRequest r;
  ApiError error;
  if (!ParseOpenAiRequest(req.body, Endpoint::kTokenize, &r, &error, ctx.options.max_json_depth) ||
      !CheckModel(ctx, r.model, &error)) {
    return ErrorReply(error);
  }
  std::vector<std::vector<int32_t>> prompts;
  if (!BuildPrompts(ctx, r, &prompts, &error)) return ErrorReply(error);
  const std::vector<int32_t>& ids = prompts.at(0);  // one prompt: the parser requires it
  json body;
  body["count"] = ids.size();
  body["max_model_len"] = ctx.max_model_len;
  body["tokens"] = ids;
  if (r.return_token_strs) {
    json strs = json::array();
    for (int32_t id : ids) {
      const std::string* token = ctx.tokenizer->IdToToken(id);
      strs.push_back(token == nullptr ? std::string() : *token);
    }
    body["token_strs"] = std::move(strs);
  } else {
    body["token_strs"] = nullptr;
  }
  return JsonReply(body);
}

HttpResponse HandleDetokenize(ServerContext& ctx, const HttpRequest& req) {
  OpenAiRequest r;
  ApiError error;
  if (!ParseOpenAiRequest(req.body, Endpoint::kDetokenize, &r, &error, ctx.options.max_json_depth) ||
      !CheckModel(ctx, r.model, &error)) {
    return ErrorReply(error);
  }
  if (ctx.tokenizer == nullptr) {
    return ErrorReply(BadRequest("tokens",
                                 "the model folder has no tokenizer (tokenizer.json, tokenizer.model or "
                                 "vocab.json + merges.txt)"));
  }
  for (size_t i = 0; i < r.tokens.size(); ++i) {
    if (r.tokens[i] >= ctx.tokenizer->id_limit()) {
      return ErrorReply(BadRequest("tokens", "tokens[" + std::to_string(i) + "] = " +
                                                 std::to_string(r.tokens[i]) +
                                                 " is not in the tokenizer's vocabulary (ids 0.." +
                                                 std::to_string(ctx.tokenizer->id_limit() - 1) + ")"));
    }
  }
  return JsonReply(json{{"prompt", ctx.tokenizer->Decode(r.tokens, /*skip_special_tokens=*/false)}});
}

}  // namespace loom::server
