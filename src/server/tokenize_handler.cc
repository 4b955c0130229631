// vLLM's /tokenize and /detokenize: a prompt (text or a chat) to token ids, token ids to text.
#include "server/tokenize_handler.h"

#include <nlohmann/json.hpp>

#include "server/openai_request.h"
#include "server/prompt_builder.h"

namespace loom::server {

using json = nlohmann::ordered_json;

namespace {

// The model a request names: the base when it names none, or an adapter a completion could
// use (registered, or on demand in --lora-dir). Only the name is checked: tokenizing needs no
// weights, so nothing is loaded or evicted (as vLLM's tokenize routes).
bool CheckModel(const ServerContext& ctx, const std::string& model, ApiError* error) {
  if (model.empty() || ctx.options.NamesBase(model)) return true;
  if (ctx.options.merged_adapter.empty() && ctx.adapters != nullptr && ctx.adapters->Knows(model))
    return true;
  *error = ApiError{404, "The model `" + model + "` does not exist.", "model", ""};
  return false;
}

// A JSON string literal (invalid UTF-8 replaced, as every body loom writes).
void AppendJsonString(const std::string& s, std::string* out) {
  *out += json(s).dump(-1, ' ', false, json::error_handler_t::replace);
}

// The body parsed for `endpoint` and its model checked; false with *error filled.
bool Parse(const ServerContext& ctx, const HttpRequest& req, Endpoint endpoint, OpenAiRequest* r,
           ApiError* error) {
  return ParseOpenAiRequest(req.body, endpoint, r, error, ctx.options.max_json_depth) &&
         CheckModel(ctx, r->model, error);
}

HttpResponse JsonReply(std::string body) {
  HttpResponse reply;
  reply.content_type = "application/json";
  reply.body = std::move(body);
  return reply;
}

}  // namespace

HttpResponse HandleTokenize(ServerContext& ctx, const HttpRequest& req,
                            const std::function<bool()>& gone) {
  OpenAiRequest r;
  ApiError error;
  if (!Parse(ctx, req, Endpoint::kTokenize, &r, &error)) return ErrorReply(error);
  std::vector<std::vector<int32_t>> prompts;
  if (!BuildPrompts(ctx, r, &prompts, &error, gone)) return ErrorReply(error);
  const std::vector<int32_t>& ids = prompts.at(0);  // one prompt: the parser requires it
  // Written out directly: a json array of ids and strings took ~45 bytes per token of the
  // body at its peak (an 8 MiB prompt: ~1 GB with token_strs), per handler thread.
  std::string out;
  out.reserve(64 + ids.size() * (r.return_token_strs ? 16 : 7));
  out += "{\"count\":" + std::to_string(ids.size()) +
         ",\"max_model_len\":" + std::to_string(ctx.max_model_len) + ",\"tokens\":[";
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i > 0) out += ',';
    out += std::to_string(ids[i]);
  }
  out += "],\"token_strs\":";
  if (r.return_token_strs) {
    out += '[';
    for (size_t i = 0; i < ids.size(); ++i) {
      if (i > 0) out += ',';
      const std::string* token = ctx.tokenizer->IdToToken(ids[i]);
      AppendJsonString(token == nullptr ? std::string() : *token, &out);
    }
    out += ']';
  } else {
    out += "null";
  }
  out += '}';
  return JsonReply(std::move(out));
}

HttpResponse HandleDetokenize(ServerContext& ctx, const HttpRequest& req) {
  OpenAiRequest r;
  ApiError error;
  if (!Parse(ctx, req, Endpoint::kDetokenize, &r, &error)) return ErrorReply(error);
  if (ctx.tokenizer == nullptr) {
    return ErrorReply(
        BadRequest("tokens",
                   "the model folder has no tokenizer (tokenizer.json, tokenizer.model or "
                   "vocab.json + merges.txt)"));
  }
  // No sequence of this model is longer: an 8 MiB body of long-token ids decoded to ~300 MB on
  // a handler thread (helper 90).
  if (static_cast<int64_t>(r.tokens.size()) > ctx.max_model_len) {
    return ErrorReply(BadRequest(
        "tokens", std::to_string(r.tokens.size()) + " tokens, more than the model's context (" +
                      std::to_string(ctx.max_model_len) + ", --max-model-len)"));
  }
  for (size_t i = 0; i < r.tokens.size(); ++i) {
    if (r.tokens[i] >= ctx.tokenizer->id_limit()) {
      return ErrorReply(BadRequest(
          "tokens", "tokens[" + std::to_string(i) + "] = " + std::to_string(r.tokens[i]) +
                        " is not in the tokenizer's vocabulary (ids 0.." +
                        std::to_string(ctx.tokenizer->id_limit() - 1) + ")"));
    }
  }
  auto text = ctx.tokenizer->DecodeChecked(r.tokens, /*skip_special_tokens=*/false);
  if (!text.ok()) return ErrorReply(FromStatus(text.status(), "tokens"));
  std::string out = "{\"prompt\":";
  AppendJsonString(*text, &out);
  out += '}';
  return JsonReply(std::move(out));
}

}  // namespace loom::server
