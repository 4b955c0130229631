// vLLM's /tokenize and /detokenize: a prompt (text or a chat) to token ids, token ids to text.
#pragma once

#include <functional>

#include "server/http_exchange.h"
#include "server/server_context.h"

namespace loom::server {

// POST /tokenize: {"prompt": text} or {"messages": [...], ...} → {"count", "max_model_len",
// "tokens", "token_strs"}, the ids a completion of the same prompt would run on.
HttpResponse HandleTokenize(ServerContext& ctx, const HttpRequest& req,
                            const std::function<bool()>& gone = nullptr);

// POST /detokenize: {"tokens": [...]} → {"prompt": text}, special tokens kept (as vLLM).
HttpResponse HandleDetokenize(ServerContext& ctx, const HttpRequest& req);

}  // namespace loom::server
