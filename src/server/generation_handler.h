// Generation routes: /v1/completions and /v1/chat/completions, streaming (SSE) and not.
#pragma once

#include <httplib.h>

#include "server/openai_request.h"
#include "server/server_context.h"

namespace loom::server {

// Parses, resolves the adapter, renders/tokenizes, submits one sequence per (prompt, choice)
// and answers (a JSON body, or an SSE stream that aborts its sequences when the client goes).
void HandleGeneration(ServerContext& ctx, Endpoint endpoint, const httplib::Request& req,
                      httplib::Response& res);

// Sends an ApiError as the response.
void SendError(httplib::Response& res, const ApiError& error);

}  // namespace loom::server
