// HTTP routes: generation, models, adapter load/unload, health, version, metrics; auth and limits.
#include "server/http_server.h"

#include <httplib.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <cctype>
#include <chrono>
#include <optional>
#include <thread>

#include <nlohmann/json.hpp>

#include "base/json.h"
#include "server/connection.h"
#include "server/generation_handler.h"

namespace loom::server {

using json = nlohmann::ordered_json;

namespace {

constexpr char kVersion[] = "0.2.0";
constexpr size_t kMaxHeaderBytes = 64 << 10;

// Constant-time comparison (the key's length is not secret).
bool SameKey(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

bool JsonContentType(const httplib::Request& req) {
  if (!req.has_header("Content-Type")) return true;
  // As FastAPI (vLLM): the media type, case-insensitive, is application/json or
  // application/*+json; parameters (charset) are ignored.
  std::string ct = req.get_header_value("Content-Type");
  ct = ct.substr(0, ct.find(';'));
  while (!ct.empty() && (ct.back() == ' ' || ct.back() == '\t')) ct.pop_back();
  for (char& c : ct) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  const auto ends_with = [&](const std::string& suffix) {
    return ct.size() >= suffix.size() && ct.compare(ct.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  return ct == "application/json" || (ct.rfind("application/", 0) == 0 && ends_with("+json"));
}

// Whether cpp-httplib reads a body for this method at all (it never does for GET, HEAD, OPTIONS:
// their body bytes would be parsed as the next request on the connection).
bool ReadsBody(const std::string& method) {
  return method == "POST" || method == "PUT" || method == "PATCH" || method == "DELETE";
}

// Whether the request carries a Content-Length body (chunked ones are refused with 411).
bool HasBody(const httplib::Request& req) {
  const std::string length = req.get_header_value("Content-Length");
  return !length.empty() && length.find_first_not_of("0 \t") != std::string::npos;
}

// Whether a refusal may leave body bytes unread on the connection: a body, a chunked one, or a
// Content-Length that is repeated or empty (cpp-httplib reads those as 0).
bool BodyMayBeUnread(const httplib::Request& req) {
  return HasBody(req) || req.has_header("Transfer-Encoding") ||
         req.get_header_value_count("Content-Length") > 1 ||
         (req.has_header("Content-Length") && req.get_header_value("Content-Length").empty());
}

// Auth, readiness and the body's content type for a /v1 request; nothing when it may go on.
std::optional<ApiError> AdmissionError(const ServerContext& ctx, const httplib::Request& req) {
  if (!ctx.options.api_key.empty()) {
    const std::string auth = req.get_header_value("Authorization");
    const std::string prefix = "Bearer ";
    if (auth.rfind(prefix, 0) != 0 || !SameKey(auth.substr(prefix.size()), ctx.options.api_key)) {
      return ApiError{401, "missing or invalid API key (Authorization: Bearer ...)", "", ""};
    }
  }
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
      *error = BadRequest(it.key(), "unknown field '" + it.key() + "'");
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

}  // namespace

HttpServer::HttpServer(ServerContext* ctx) : ctx_(ctx), http_(std::make_unique<httplib::Server>()) {
  const int threads = ctx_->options.http_threads;
  http_->new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
  http_->set_payload_max_length(ctx_->options.max_body_bytes);
  http_->set_keep_alive_max_count(1000);
  http_->set_read_timeout(30, 0);
  http_->set_write_timeout(10, 0);
  // Debian's compiled cpp-httplib listens with a backlog of 5: a burst of clients would see
  // dropped SYNs and 1 s retransmits. Keep the listening socket to raise it after bind.
  // TCP_NODELAY (inherited by the accepted sockets on Linux): cpp-httplib writes a reply's
  // headers and body apart, and Nagle + delayed ACK added ~40 ms to every reply after the first
  // on a kept-alive connection (a /metrics scrape, each request of an openai client).
  http_->set_socket_options([this](socket_t sock) {
    httplib::default_socket_options(sock);
    int one = 1;
    ::setsockopt(sock, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    listen_fd_ = sock;
  });
  Routes();
}

HttpServer::~HttpServer() = default;

Status HttpServer::Bind() {
  const auto& o = ctx_->options;
  if (o.port == 0) {
    port_ = http_->bind_to_any_port(o.host);
    if (port_ <= 0) return Unavailable("cannot bind " + o.host + " on any port");
  } else {
    if (!http_->bind_to_port(o.host, o.port)) {
      return Unavailable("cannot bind " + o.host + ":" + std::to_string(o.port) +
                         " (in use, or not an address of this machine)");
    }
    port_ = o.port;
  }
  if (listen_fd_ >= 0) ::listen(listen_fd_, SOMAXCONN);  // re-listen only changes the backlog
  return OkStatus();
}

void HttpServer::Listen() { http_->listen_after_bind(); }

void HttpServer::Stop() {
  // stop() before listen_after_bind() has started would be lost (and Listen never return):
  // wait for the server to run first (bounded: Listen starts right after Bind).
  for (int i = 0; i < 500 && !http_->is_running(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  http_->stop();
  // Idle keep-alive connections would hold their threads (and the exit) for up to 5 s.
  if (port_ > 0) ShutdownClientSockets(port_);
}

void HttpServer::Routes() {
  ServerContext& ctx = *ctx_;
  // Auth and readiness for /v1; everything else is open (/health, /metrics, /version).
  http_->set_pre_routing_handler([&ctx](const httplib::Request& req, httplib::Response& res) {
    // Runs before the body is read. Debian's cpp-httplib 0.11 bounds Content-Length bodies
    // (413) and each header line (8 KiB), but neither chunked uploads nor the header count.
    // A request refused here has its body unread, and cpp-httplib keeps the connection open
    // whatever the reply says: the body's bytes would be parsed as the next request on it (a
    // kept-alive client's next request got a 400, or no reply). So a /v1 request with a body is
    // admitted after its body is read (bounded by the payload limit), in its handler; here only
    // the refusals that cannot wait, with Connection: close for the client's sake.
    auto reject = [&req, &res](const ApiError& error) {
      SendError(res, error);
      if (BodyMayBeUnread(req)) res.set_header("Connection", "close");
      return httplib::Server::HandlerResponse::Handled;
    };
    size_t header_bytes = 0;
    for (const auto& [k, v] : req.headers) header_bytes += k.size() + v.size() + 4;
    if (header_bytes > kMaxHeaderBytes) {
      return reject(ApiError{431, "request headers exceed " + std::to_string(kMaxHeaderBytes) + " bytes",
                             "", "RequestHeaderFieldsTooLarge"});
    }
    if (req.has_header("Transfer-Encoding")) {
      return reject(ApiError{411, "chunked request bodies are not accepted; send Content-Length", "",
                             "LengthRequired"});
    }
    // cpp-httplib reads a malformed or repeated Content-Length as 0 and a GET's body not at all:
    // the body's bytes became the next request on the connection (a proxy reusing it would
    // answer one client's request with another's reply). Refused, and with Connection: close
    // (set by reject) a proxy drops the connection instead of reusing it.
    if (req.get_header_value_count("Content-Length") > 1) {
      return reject(ApiError{400, "more than one Content-Length header", "", ""});
    }
    if (const std::string length = req.get_header_value("Content-Length");
        req.has_header("Content-Length") &&
        (length.empty() || length.find_first_not_of("0123456789") != std::string::npos)) {
      return reject(ApiError{400, "Content-Length '" + length.substr(0, 32) + "' is not a number", "", ""});
    }
    if (!ReadsBody(req.method) && HasBody(req)) {
      return reject(ApiError{400, "a " + req.method + " request must not have a body", "", ""});
    }
    if (req.path.rfind("/v1/", 0) != 0 || HasBody(req)) return httplib::Server::HandlerResponse::Unhandled;
    if (std::optional<ApiError> error = AdmissionError(ctx, req)) return reject(*error);
    return httplib::Server::HandlerResponse::Unhandled;
  });
  http_->set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    // A multipart body is parsed by cpp-httplib as it is read (before the route's admission
    // check), and a JSON one fails that parse: it is the content type that is wrong.
    if (res.status == 400 && req.get_header_value("Content-Type").rfind("multipart/", 0) == 0) {
      res.status = 415;
      res.set_content(ApiError{415, "Content-Type must be application/json", "", "UnsupportedMediaType"}.Body(),
                      "application/json");
      return;
    }
    std::string message = "error " + std::to_string(res.status);
    if (res.status == 404) message = "no route " + req.method + " " + req.path;
    if (res.status == 413) message = "the request body is too large";
    if (res.status == 400) message = "malformed HTTP request";
    if (res.status == 414) message = "the request URI is too long";
    res.set_content(ApiError{res.status, message, "", ""}.Body(), "application/json");
  });
  http_->set_exception_handler(
      [](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
        std::string what = "internal error";
        try {
          if (ep) std::rethrow_exception(ep);
        } catch (const std::exception& e) {
          what = std::string("internal error: ") + e.what();
        } catch (...) {
        }
        SendError(res, ApiError{500, what, "", ""});
      });

  // Every /v1 POST route: admitted here, once its body is read (see the pre-routing handler).
  auto post = [this, &ctx](const char* path, httplib::Server::Handler handler) {
    http_->Post(path, [&ctx, handler = std::move(handler)](const httplib::Request& req,
                                                           httplib::Response& res) {
      if (std::optional<ApiError> error = AdmissionError(ctx, req)) return SendError(res, *error);
      handler(req, res);
    });
  };
  auto generation = [&ctx](Endpoint endpoint) {
    return [&ctx, endpoint](const httplib::Request& req, httplib::Response& res) {
      if (ctx.draining.load()) {
        return SendError(res, ApiError{503, "the server is shutting down", "", ""});
      }
      HandleGeneration(ctx, endpoint, req, res);
    };
  };
  post("/v1/completions", generation(Endpoint::kCompletions));
  post("/v1/chat/completions", generation(Endpoint::kChat));

  http_->Get("/health", [&ctx](const httplib::Request&, httplib::Response& res) {
    if (ctx.draining.load()) {  // a readiness probe stops routing here while it drains
      SendError(res, ApiError{503, "the server is shutting down", "", ""});
      return;
    }
    if (!ctx.ready.load()) {
      res.status = 503;
      res.set_header("Retry-After", "1");
      res.set_content(ApiError{503, "the model is still loading", "", ""}.Body(), "application/json");
      return;
    }
    res.status = 200;
  });
  http_->Get("/version", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(json{{"version", kVersion}}.dump(), "application/json");
  });
  http_->Get("/metrics", [&ctx](const httplib::Request&, httplib::Response& res) {
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
    res.set_content(RenderMetrics(ctx.metrics, s, ctx.options.served_model_name),
                    "text/plain; version=0.0.4; charset=utf-8");
  });
  http_->Get("/v1/models", [&ctx](const httplib::Request& req, httplib::Response& res) {
    // The pre-routing handler admits body-less /v1 requests; checked again here so no path
    // (a body the pre-router let through) lists the adapters without the key.
    if (std::optional<ApiError> error = AdmissionError(ctx, req)) return SendError(res, *error);
    const int64_t created = static_cast<int64_t>(std::time(nullptr));
    json data = json::array();
    auto entry = [&](const std::string& id, const std::string& root, const json& parent) {
      return json{{"id", id},          {"object", "model"}, {"created", created},
                  {"owned_by", "loom"}, {"root", root},     {"parent", parent},
                  {"max_model_len", ctx.max_model_len}};
    };
    const std::string& base = ctx.options.served_model_name;
    if (!ctx.options.merged_adapter.empty()) {
      data.push_back(entry(ctx.options.merged_adapter, ctx.options.model_dir, nullptr));
    } else {
      data.push_back(entry(base, ctx.options.model_dir, nullptr));
    }
    if (ctx.adapters != nullptr) {
      for (const auto& a : ctx.adapters->List()) data.push_back(entry(a.name, a.dir, base));
    }
    res.set_content(json{{"object", "list"}, {"data", data}}.dump(-1, ' ', false,
                                                                  json::error_handler_t::replace),
                    "application/json");
  });

  // vLLM's runtime adapter endpoints (VLLM_ALLOW_RUNTIME_LORA_UPDATING): --allow-runtime-lora.
  post("/v1/load_lora_adapter", [&ctx](const httplib::Request& req, httplib::Response& res) {
    if (!ctx.options.allow_runtime_lora || ctx.adapters == nullptr) {
      return SendError(res, ApiError{404, "runtime adapter loading is off (start with "
                                          "--allow-runtime-lora and --lora-dir)", "", ""});
    }
    json body;
    ApiError error;
    if (!ParseAdminBody(req.body, {"lora_name", "lora_path"}, {}, &body, &error)) {
      return SendError(res, error);
    }
    const std::string name = body["lora_name"].get<std::string>();
    if (name == ctx.options.served_model_name) {
      return SendError(res, BadRequest("lora_name", "'" + name + "' is the base model's name"));
    }
    if (ctx.adapters->Contains(name)) {
      return SendError(res, BadRequest("lora_name", "The lora adapter '" + name +
                                                        "' has already been loaded."));
    }
    auto dir = ctx.adapters->ResolveRuntimePath(body["lora_path"].get<std::string>());
    if (!dir.ok()) return SendError(res, FromStatus(dir.status(), "lora_path"));
    Status st = ctx.adapters->Register(name, dir->dir, dir->root);
    if (!st.ok()) {
      // A folder that exists but does not validate is the client's error (400), never 500.
      ApiError e = FromStatus(st, "lora_path");
      if (e.http_status == 500) e.http_status = 400;
      if (st.message().find("already loaded") != std::string::npos ||
          st.message().rfind("adapter name '", 0) == 0) {
        e.param = "lora_name";
      }
      return SendError(res, e);
    }
    res.set_content("Success: LoRA adapter '" + name + "' added successfully.", "text/plain");
  });
  post("/v1/unload_lora_adapter", [&ctx](const httplib::Request& req, httplib::Response& res) {
    if (!ctx.options.allow_runtime_lora || ctx.adapters == nullptr) {
      return SendError(res, ApiError{404, "runtime adapter loading is off (start with "
                                          "--allow-runtime-lora)", "", ""});
    }
    json body;
    ApiError error;
    if (!ParseAdminBody(req.body, {"lora_name"}, {"lora_int_id"}, &body, &error)) {
      return SendError(res, error);
    }
    const std::string name = body["lora_name"].get<std::string>();
    Status st = ctx.adapters->Unregister(name);
    if (!st.ok()) {
      return SendError(res, ApiError{404, "The lora adapter '" + name + "' cannot be found.",
                                     "lora_name", ""});
    }
    res.set_content("Success: LoRA adapter '" + name + "' removed successfully.", "text/plain");
  });
}

}  // namespace loom::server
