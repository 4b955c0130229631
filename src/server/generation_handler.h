// Generation routes: /v1/completions and /v1/chat/completions, streaming (SSE) and not.
#pragma once

#include <memory>

#include "server/http_exchange.h"
#include "server/openai_request.h"
#include "server/server_context.h"

namespace loom::server {

// Parses, resolves the adapter, renders/tokenizes, submits one sequence per (prompt, choice)
// and answers through `ex` — a JSON body once every choice has finished, or an SSE stream —
// without waiting: the engine's callbacks wake the exchange. A client that leaves aborts the
// request's sequences. Runs on a handler thread (the adapter may be loaded from disk). `load`
// (HoldServerLoad) is kept until the request's answer and sequences are done.
void HandleGeneration(ServerContext& ctx, Endpoint endpoint, const HttpRequest& req,
                      const std::shared_ptr<Exchange>& ex,
                      std::shared_ptr<const void> load = nullptr);

}  // namespace loom::server
