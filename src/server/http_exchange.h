// HTTP request, response and the Exchange a handler answers through (no transport types here).
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "server/api_error.h"

namespace loom::server {

// One parsed request; the body is complete (bounded by --max-body) before a handler sees it.
struct HttpRequest {
  std::string method;  // "GET", "POST", ...
  std::string path;    // the target without its query string
  std::string body;
  int version = 11;    // 10 or 11
  // Header fields in arrival order, names as sent (compare with CaseEqual).
  std::vector<std::pair<std::string, std::string>> headers;
  // When the request was read whole: the latency metrics count from here (a wait for the
  // handler pool or an adapter load is part of the time to first token).
  std::chrono::steady_clock::time_point received = std::chrono::steady_clock::now();
  // The body's share of the transport's budget for request bodies in memory, given back when
  // the last copy of the request goes: a body waiting for a handler thread, or being handled,
  // still counts (it was given back when the body was parsed, and queued bodies were unbounded).
  std::shared_ptr<const void> body_hold;
  // A body read and dropped unread (ScreenFn: its route reads none): how many bytes it had.
  size_t dropped_body_bytes = 0;

  // The first value of `name` (case-insensitive), or "".
  std::string header(const std::string& name) const;
  bool has_header(const std::string& name) const;
  int header_count(const std::string& name) const;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;  // besides the framing ones
  bool close = false;  // close the connection after this response
};

// A non-streamed reply that waits on the engine (a completion).
class DeferredReply {
 public:
  virtual ~DeferredReply() = default;
  // I/O thread, after each Wake: whether everything the response needs has arrived. Cheap.
  virtual bool Ready() = 0;
  // Once, after Ready, on a worker thread (a large body is not built on the I/O thread).
  virtual HttpResponse Build() = 0;
  // The client left first (I/O thread): cancel the work.
  virtual void Abandon() = 0;
};

// A streamed body (SSE): pulled on the I/O thread after each Wake, or on a worker thread when
// NextPullIsLarge (never two Pulls at once, and Abandon may come from the I/O thread meanwhile).
// The connection pulls only while its output waiting to be written is under
// TransportOptions::max_buffered_bytes, so what a client has not taken yet waits in the source.
class StreamSource {
 public:
  virtual ~StreamSource() = default;
  // Appends what is ready to *out, stopping after the event that brings *out to `max_bytes` or
  // more (the rest waits for the next Pull; one event larger than that comes whole); true once
  // the body is complete (nothing more will come).
  virtual bool Pull(std::string* out, size_t max_bytes) = 0;
  // Whether the next Pull may build a large chunk (an echo's prompt log-probs, up to 2^18
  // entries, megabytes of JSON; many tokens' log-prob entries): then it runs on a worker thread,
  // as a DeferredReply's Build, so the I/O thread's other connections' tokens do not wait
  // behind it. I/O thread.
  virtual bool NextPullIsLarge() { return false; }
  // Whether what waits in the source for a client that is not reading (its connection's output
  // is at the bound) has passed the source's own bound: the connection is then closed and the
  // source abandoned, as a client that makes no progress for write_timeout_s is. I/O thread.
  virtual bool Overrun() { return false; }
  virtual void Abandon() = 0;
};

// One request's answer. Exactly one of Reply / Defer / Stream, once, from any thread; Wake from
// any thread (an engine callback). Thread-safety: all methods are thread-safe.
class Exchange {
 public:
  virtual ~Exchange() = default;
  virtual void Reply(HttpResponse response) = 0;
  virtual void Defer(std::shared_ptr<DeferredReply> reply) = 0;
  // `head` gives the status and headers; its body is ignored.
  virtual void Stream(HttpResponse head, std::shared_ptr<StreamSource> source) = 0;
  virtual void Wake() = 0;
  // Whether the client has left (its connection is closed): work for it may stop. Polled by
  // waits a handler thread could otherwise sit out for nobody (the large-prompt gate).
  virtual bool Gone() const { return false; }
};

bool CaseEqual(const std::string& a, const std::string& b);

// The status line and header block of `r`. `framing`: a Content-Length or Transfer-Encoding
// line, or "" (the body ends when the connection closes); `close` adds Connection: close, else
// an HTTP/1.0 client is told keep-alive.
std::string ResponseHead(const HttpResponse& r, const std::string& framing, bool close,
                         bool http10);
// An ApiError as a JSON response (503 with Retry-After).
HttpResponse ErrorReply(const ApiError& error);

}  // namespace loom::server
