// HTTP routes: generation, tokenize, models, adapter load/unload, health, version, metrics; auth
// and limits.
#include "server/http_server.h"

#include <algorithm>
#include <cctype>
#include <ctime>
#include <nlohmann/json.hpp>
#include <optional>

#include "base/json.h"
#include "server/generation_handler.h"
#include "server/openai_response.h"
#include "server/tokenize_handler.h"

namespace loom::server {

using json = nlohmann::ordered_json;

namespace {

constexpr char kVersion[] = "0.2.0";

// Constant-time comparison of a given key with the server's: the time depends on the server
// key's length only, not on where the given one differs or how long it is.
bool SameKey(const std::string& given, const std::string& key) {
  unsigned char diff = given.size() == key.size() ? 0 : 1;
  const size_t n = given.size();
  for (size_t i = 0; i < key.size(); ++i) {
    const unsigned char g = n == 0 ? 0 : static_cast<unsigned char>(given[i % n]);
    diff |= static_cast<unsigned char>(g ^ static_cast<unsigned char>(key[i]));
  }
  return diff == 0;
}

bool JsonContentType(const HttpRequest& req) {
  if (!req.has_header("Content-Type")) return true;
  // As FastAPI (vLLM): the media type, case-insensitive, is application/json or
  // application/*+json; parameters (charset) are ignored.
  std::string ct = req.header("Content-Type");
  ct = ct.substr(0, ct.find(';'));
  while (!ct.empty() && (ct.back() == ' ' || ct.back() == '\t')) ct.pop_back();
  for (char& c : ct) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  const auto ends_with = [&](const std::string& suffix) {
    return ct.size() >= suffix.size() && ct.compare(ct.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  return ct == "application/json" || (ct.rfind("application/", 0) == 0 && ends_with("+json"));
}

// With --api-key, a request without the key: its 401.
std::optional<ApiError> AuthError(const ServerContext& ctx, const HttpRequest& req) {
  if (ctx.options.api_key.empty()) return std::nullopt;
  const std::string auth = req.header("Authorization");
  // As vLLM's middleware (value.partition(" ")): the scheme, before the first space, is "Bearer"
  // in any case (case-insensitive, RFC 9110 §11.1), and the key is all that follows that one
  // space (a second space is part of it, so it does not match).
  const size_t space = auth.find(' ');
  std::string scheme = auth.substr(0, space);
  for (char& c : scheme) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (space == std::string::npos || scheme != "bearer" ||
      !SameKey(auth.substr(space + 1), ctx.options.api_key)) {
    return ApiError{401, "missing or invalid API key (Authorization: Bearer ...)", "", ""};
  }
  return std::nullopt;
}

// Whether a route answers only with the API key (when one is set): everything under /v1 (as
// vLLM's middleware), and /tokenize and /detokenize.
bool NeedsKey(const std::string& path) {
  return path.rfind("/v1", 0) == 0 || path == "/tokenize" || path == "/detokenize";
}

// Methods whose request may carry a body (RFC 9110 gives one on GET, HEAD or OPTIONS no meaning).
bool MayHaveBody(const std::string& m) {
  return m == "POST" || m == "PUT" || m == "PATCH" || m == "DELETE";
}

// Whether a request's route reads its body: the generation, adapter and tokenize POSTs.
bool ReadsBody(const std::string& m, const std::string& p) {
  return m == "POST" &&
         (p == "/v1/completions" || p == "/v1/chat/completions" || p == "/v1/load_lora_adapter" ||
          p == "/v1/unload_lora_adapter" || p == "/tokenize" || p == "/detokenize");
}

ApiError BodyOnMethodError(const std::string& m) {
  return ApiError{400, "a " + m + " request must not have a body", "", ""};
}

// Auth, readiness and the body's content type for a /v1 request; nothing when it may go on.
std::optional<ApiError> AdmissionError(const ServerContext& ctx, const HttpRequest& req) {
  if (std::optional<ApiError> error = AuthError(ctx, req)) return error;
  if (!ctx.ready.load()) return ApiError{503, "the model is still loading", "", ""};
  if (req.method == "POST" && !JsonContentType(req)) {
    return ApiError{415, "Content-Type must be application/json", "", "UnsupportedMediaType"};
  }
  return std::nullopt;
}

// Parses a small admin body ({"lora_name", "lora_path"}): only the named fields, strings.
bool ParseAdminBody(const std::string& body, const std::vector<std::string>& required,
                    const std::vector<std::string>& optional, json* out, ApiError* error) {
  JsonLimits limits;
  limits.max_depth = 8;
  limits.max_containers = kMaxRequestContainers;
  auto parsed = ParseOrderedJson(body, "request body", limits);
  if (!parsed.ok()) {
    *error = BadRequest("", parsed.status().message());
    return false;
  }
  *out = std::move(parsed).value();
  if (!out->is_object()) {
    *error = BadRequest("", "the request body must be a JSON object");
    return false;
  }
  for (auto it = out->begin(); it != out->end(); ++it) {
    const bool known = std::find(required.begin(), required.end(), it.key()) != required.end() ||
                       std::find(optional.begin(), optional.end(), it.key()) != optional.end();
    if (!known) {
      const std::string key = KeyForMessage(it.key());  // quoted short (a key may be 100 KB)
      *error = BadRequest(key, "unknown field '" + key + "'");
      return false;
    }
  }
  for (const auto& f : required) {
    if (!out->contains(f) || !(*out)[f].is_string() || (*out)[f].get<std::string>().empty()) {
      *error = BadRequest(f, f + " must be a non-empty string");
      return false;
    }
  }
  return true;
}

HttpResponse Text(std::string body, const char* content_type) {
  HttpResponse r;
  r.content_type = content_type;
  r.body = std::move(body);
  return r;
}

// The start of both adapter routes: runtime loading must be on (`flags` says how), and the
// body is parsed into *body. An error response, or nothing when the route may go on.
std::optional<HttpResponse> AdminBody(const ServerContext& ctx, const HttpRequest& req, const char* flags,
                                      const std::vector<std::string>& required,
                                      const std::vector<std::string>& optional, json* body) {
  if (!ctx.options.allow_runtime_lora || ctx.adapters == nullptr) {
    return ErrorReply(ApiError{404, std::string("runtime adapter loading is off (start with ") + flags + ")",
                               "", ""});
  }
  ApiError error;
  if (!ParseAdminBody(req.body, required, optional, body, &error)) return ErrorReply(error);
  return std::nullopt;
}

HttpResponse HandleLoad(ServerContext& ctx, const HttpRequest& req) {
  json body;
  // base_model_name: vLLM accepts it and changes nothing (the Gateway API Inference Extension's
  // LoRA syncer always sends it); load_inplace: replace an adapter of that name (vLLM's).
  if (auto refused =
          AdminBody(ctx, req, "--allow-runtime-lora and --lora-dir", {"lora_name", "lora_path"},
                    {"base_model_name", "load_inplace"}, &body)) {
    return *refused;
  }
  if (body.contains("base_model_name") && !body["base_model_name"].is_null() &&
      !body["base_model_name"].is_string()) {
    return ErrorReply(BadRequest("base_model_name", "base_model_name must be a string"));
  }
  bool inplace = false;
  if (body.contains("load_inplace") && !body["load_inplace"].is_null()) {
    if (!body["load_inplace"].is_boolean()) {
      return ErrorReply(BadRequest("load_inplace", "load_inplace must be a boolean"));
    }
    inplace = body["load_inplace"].get<bool>();
  }
  const std::string name = body["lora_name"].get<std::string>();
  if (ctx.options.NamesBase(name)) {  // runtime loading is off with --merge: a served name
    return ErrorReply(BadRequest("lora_name", "'" + name + "' is the base model's name"));
  }
  if (!inplace && ctx.adapters->Contains(name)) {
    return ErrorReply(BadRequest("lora_name", "The lora adapter '" + name + "' has already been loaded."));
  }
  auto dir = ctx.adapters->ResolveRuntimePath(body["lora_path"].get<std::string>());
  if (!dir.ok()) return ErrorReply(FromStatus(dir.status(), "lora_path"));
  Status st = ctx.adapters->Register(name, dir->dir, dir->root, /*replace=*/inplace);
  if (!st.ok()) {
    // A folder that exists but does not validate is the client's error (400), never 500.
    ApiError e = FromStatus(st, "lora_path");
    if (e.http_status == 500) e.http_status = 400;
    // The name is what is wrong: taken, invalid, or one too many (--max-lora-names).
    if (st.message().find("already loaded") != std::string::npos ||
        st.message().rfind("adapter name '", 0) == 0 ||
        st.message().find("(--max-lora-names)") != std::string::npos) {
      e.param = "lora_name";
    }
    return ErrorReply(e);
  }
  return Text("Success: LoRA adapter '" + name + "' added successfully.", "text/plain");
}

HttpResponse HandleUnload(ServerContext& ctx, const HttpRequest& req) {
  json body;
  if (auto refused = AdminBody(ctx, req, "--allow-runtime-lora", {"lora_name"}, {"lora_int_id"}, &body)) {
    return *refused;
  }
  // vLLM's UnloadLoRAAdapterRequest: lora_int_id an integer or null, and unused (the name decides).
  if (body.contains("lora_int_id") && !body["lora_int_id"].is_null() && !body["lora_int_id"].is_number_integer()) {
    return ErrorReply(BadRequest("lora_int_id", "lora_int_id must be an integer"));
  }
  const std::string name = body["lora_name"].get<std::string>();
  if (!ctx.adapters->Unregister(name).ok()) {
    return ErrorReply(ApiError{404, "The lora adapter '" + name + "' cannot be found.", "lora_name", ""});
  }
  return Text("Success: LoRA adapter '" + name + "' removed successfully.", "text/plain");
}

// Adapter names up to which /v1/models is built on the I/O thread (~1 ms at 128).
constexpr size_t kModelsOnIoThread = 128;

HttpResponse HandleModels(const ServerContext& ctx) {
  const int64_t created = static_cast<int64_t>(std::time(nullptr));
  json data = json::array();
  auto entry = [&](const std::string& id, const std::string& root, const json& parent) {
    // vLLM's ModelCard, with its one default ModelPermission (clients written against the
    // OpenAI models list of 2023 read `permission`).
    json permission = {{"id", RandomId("modelperm-")}, {"object", "model_permission"},
                       {"created", created},           {"allow_create_engine", false},
                       {"allow_sampling", true},       {"allow_logprobs", true},
                       {"allow_search_indices", false}, {"allow_view", true},
                       {"allow_fine_tuning", false},   {"organization", "*"},
                       {"group", nullptr},             {"is_blocking", false}};
    return json{{"id", id},          {"object", "model"}, {"created", created},
                {"owned_by", "loom"}, {"root", root},     {"parent", parent},
                {"max_model_len", ctx.max_model_len}, {"permission", json::array({permission})}};
  };
  const std::string& base = ctx.options.served_model_name();
  if (!ctx.options.merged_adapter.empty()) {
    data.push_back(entry(ctx.options.merged_adapter, ctx.options.model_dir, nullptr));
  } else {
    for (const std::string& name : ctx.options.served_model_names) {
      data.push_back(entry(name, ctx.options.model_dir, nullptr));
    }
  }
  if (ctx.adapters != nullptr) {
    for (const auto& a : ctx.adapters->ListNameable()) {
      // A --lora-dir sub-folder named as the base: a request naming it gets the base.
      if (!ctx.options.NamesBase(a.name)) data.push_back(entry(a.name, a.dir, base));
    }
  }
  return Text(json{{"object", "list"}, {"data", data}}.dump(-1, ' ', false, json::error_handler_t::replace),
              "application/json");
}

HttpResponse HandleMetrics(const ServerContext& ctx) {
  MetricsSnapshot s;
  if (ctx.ready.load()) {
    s.engine = ctx.engine->Stats();
    s.max_lora = ctx.max_loras;
    if (ctx.adapters != nullptr) {
      s.adapter_loads = ctx.adapters->num_loads();
      s.adapter_evictions = ctx.adapters->num_evictions();
      s.adapters_resident = ctx.adapters->num_resident();
    }
  }
  s.large_prompts_tokenizing = ctx.encode_gate.busy() ? 1 : 0;
  s.large_prompts_waiting = ctx.encode_gate.waiting();
  s.large_prompts_abandoned = ctx.encode_gate.abandoned();
  return Text(RenderMetrics(ctx.metrics, s, ctx.options.DefaultModel()),
              "text/plain; version=0.0.4; charset=utf-8");
}

HttpResponse HandleHealth(const ServerContext& ctx) {
  // A readiness probe stops routing here while the server drains or loads.
  if (ctx.draining.load()) return ErrorReply(ApiError{503, "the server is shutting down", "", ""});
  if (!ctx.ready.load()) return ErrorReply(ApiError{503, "the model is still loading", "", ""});
  return Text("", "");
}

// Runs a handler on a handler thread: an exception it lets out is a 500 to its client, never
// the end of the thread.
template <typename F>
void Guarded(Exchange& ex, F&& handle) {
  try {
    handle();
  } catch (const std::exception& e) {
    ex.Reply(ErrorReply(ApiError{500, std::string("internal error: ") + e.what(), "", ""}));
  } catch (...) {
    ex.Reply(ErrorReply(ApiError{500, "internal error", "", ""}));
  }
}

// Whether the request carried a body (Content-Length > 0, or chunked).
bool HasBody(const HttpRequest& req) {
  return !req.body.empty() || req.dropped_body_bytes > 0 || req.has_header("Transfer-Encoding");
}

}  // namespace

HttpServer::HttpServer(ServerContext* ctx) : ctx_(ctx) {
  // Only bodies a route reads are kept (against the body budget): a body on a GET is refused
  // (400, the connection closed: a proxy may have framed it otherwise), one without the key to
  // an authenticated route 401, and one to a route that reads none (a 404, a 405, /ping) is
  // dropped as it arrives. Clients without the key, or sending bodies nothing reads, cannot
  // hold the budget.
  ScreenFn screen = [ctx](const HttpRequest& head) {
    Screening s;
    if (!MayHaveBody(head.method)) {
      s.refusal = ErrorReply(BodyOnMethodError(head.method));
      s.refusal->close = true;
    } else if (NeedsKey(head.path) && AuthError(*ctx, head)) {
      s.refusal = ErrorReply(*AuthError(*ctx, head));
    } else if (!ReadsBody(head.method, head.path)) {
      s.drop_body = true;
    }
    return s;
  };
  transport_ = std::make_unique<HttpTransport>(
      ctx_->options.http,
      [this](HttpRequest req, std::shared_ptr<Exchange> ex) {
        Route(std::move(req), std::move(ex));
      },
      std::move(screen));
}

HttpServer::~HttpServer() { Stop(); }

Status HttpServer::Bind() { return transport_->Bind(); }

void HttpServer::Listen() { transport_->Run(); }

void HttpServer::Stop() { transport_->Stop(); }

// On the I/O thread: cheap answers at once (health, metrics: never behind a queue of
// generation requests); generation and adapter loads on the workers.
void HttpServer::Route(HttpRequest req, std::shared_ptr<Exchange> ex) {
  ServerContext& ctx = *ctx_;
  // Framing refusals (Host, a body on GET): a proxy must not reuse the connection. Admission
  // refusals (401, 415, 503) keep it: the transport read their body whole.
  auto refuse = [&](const ApiError& error) {
    HttpResponse r = ErrorReply(error);
    r.close = HasBody(req);
    ex->Reply(std::move(r));
  };
  const std::string& m = req.method;
  const bool get = m == "GET" || m == "HEAD";
  // RFC 9112 §3.2: an HTTP/1.1 request without a Host header, or with two, is a 400 (as
  // uvicorn/h11 answer it for vLLM).
  if (req.version >= 11 && req.header_count("Host") != 1) {
    return refuse(ApiError{400, "an HTTP/1.1 request needs exactly one Host header", "", ""});
  }
  // The body of a GET/HEAD/OPTIONS was read by its Content-Length, but a proxy in front may
  // not have framed it so (RFC 9110 gives it no meaning): refused, and the connection closed.
  if (!MayHaveBody(m) && HasBody(req)) return refuse(BodyOnMethodError(m));
  const std::string& p = req.path;
  // /ping: vLLM's alias of /health (SageMaker's probe), GET or POST.
  if ((p == "/health" && get) || (p == "/ping" && (get || m == "POST")))
    return ex->Reply(HandleHealth(ctx));
  if (p == "/version" && get) return ex->Reply(Text(json{{"version", kVersion}}.dump(), "application/json"));
  if (p == "/metrics" && get) return ex->Reply(HandleMetrics(ctx));
  // vLLM's /load (open, as its API-key middleware guards /v1 only): generation requests in
  // flight. vLLM counts them only with --enable-server-load-tracking (else 0); loom always does.
  if (p == "/load" && get) {
    return ex->Reply(
        Text(json{{"server_load", ctx.server_load.load()}}.dump(), "application/json"));
  }
  if (p == "/v1/models" && get) {
    if (std::optional<ApiError> error = AdmissionError(ctx, req))
      return ex->Reply(ErrorReply(*error));
    // A short list is answered here at once; a long one (thousands of adapter names: ~1.8 MB,
    // ~45 ms to build at 4096) on a handler thread, so that every stream's next token does not
    // wait for it (a client polling /v1/models stalled them all).
    // With --lora-dir the roots' sub-folders are listed too (read at most once a second): on a
    // handler thread.
    if (ctx.adapters == nullptr ||
        (ctx.adapters->num_names() <= kModelsOnIoThread && !ctx.adapters->has_roots())) {
      return ex->Reply(HandleModels(ctx));
    }
    transport_->Post([&ctx, ex] {
      if (!ex->Gone()) Guarded(*ex, [&] { ex->Reply(HandleModels(ctx)); });
    });
    return;
  }
  const bool generation = p == "/v1/completions" || p == "/v1/chat/completions";
  const bool admin = p == "/v1/load_lora_adapter" || p == "/v1/unload_lora_adapter";
  const bool tokenize = p == "/tokenize" || p == "/detokenize";
  if (ReadsBody(m, p)) {
    if (std::optional<ApiError> error = AdmissionError(ctx, req))
      return ex->Reply(ErrorReply(*error));
    if (ctx.draining.load()) {  // an adapter load too: it would hold the exit
      return ex->Reply(ErrorReply(ApiError{503, "the server is shutting down", "", ""}));
    }
    // Counted from here (waiting for a handler thread included) until the answer is done.
    std::shared_ptr<const void> load = generation ? HoldServerLoad(ctx) : nullptr;
    auto work = [&ctx, generation, tokenize, req = std::move(req), ex,
                 load = std::move(load)]() mutable {
      // A client that left while this waited for a handler thread: nothing to answer (an
      // adapter load or unload still runs: its effect does not depend on the reply).
      if ((generation || tokenize) && ex->Gone()) return;
      Guarded(*ex, [&] {
        if (generation) {
          HandleGeneration(
              ctx, req.path == "/v1/chat/completions" ? Endpoint::kChat : Endpoint::kCompletions,
              req, ex, std::move(load));
        } else if (tokenize) {
          ex->Reply(req.path == "/tokenize" ? HandleTokenize(ctx, req, [&ex] { return ex->Gone(); })
                                            : HandleDetokenize(ctx, req));
        } else {
          ex->Reply(req.path == "/v1/load_lora_adapter" ? HandleLoad(ctx, req) : HandleUnload(ctx, req));
        }
      });
    };
    transport_->Post(std::move(work));
    return;
  }
  // Without the key, nothing under /v1 answers more than 401 (as vLLM's middleware): a 404 or
  // 405 would tell which routes exist.
  if (p.rfind("/v1", 0) == 0) {
    if (std::optional<ApiError> error = AuthError(ctx, req)) return ex->Reply(ErrorReply(*error));
  }
  const bool known = p == "/health" || p == "/version" || p == "/metrics" || p == "/v1/models" ||
                     p == "/ping" || p == "/load" || generation || admin || tokenize;
  if (known) {
    HttpResponse r = ErrorReply(ApiError{405, "method " + m + " is not allowed on " + p, "", ""});
    r.headers.emplace_back("Allow", p == "/ping"                      ? "GET, HEAD, POST"
                                    : generation || admin || tokenize ? "POST"
                                                                      : "GET, HEAD");
    return ex->Reply(std::move(r));
  }
  ex->Reply(ErrorReply(ApiError{404, "no route " + m + " " + p.substr(0, 256), "", ""}));
}

}  // namespace loom::server
