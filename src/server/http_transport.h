// HttpTransport: HTTP/1.1 over Boost.Beast on one I/O thread — connections hold no thread.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "base/status.h"
#include "server/http_exchange.h"

namespace loom::server {

struct TransportOptions {
  std::string host = "127.0.0.1";
  int port = 8000;                    // 0: any free port
  size_t max_body_bytes = 8u << 20;   // larger bodies: 413
  // Request bodies in memory, all connections together (at least max_body_bytes): being
  // received, or read and not yet done with by their handler (queued for a worker, or running;
  // HttpRequest::body_hold). A body that would pass it is answered 503 (retry later) and its
  // connection closed.
  size_t max_pending_body_bytes = 512u << 20;
  size_t max_header_bytes = 64 << 10; // request line + header fields: 431 beyond
  double request_timeout_s = 30;      // a whole request (headers and body) must arrive in this,
                                      // counted from the previous response on a kept-alive one
  double write_timeout_s = 10;        // a write with no progress this long: the client is dropped
  // A stream's output waiting behind a write: at this bound the stream is not pulled until the
  // write takes it (what the engine delivers meanwhile waits in the StreamSource, which bounds it).
  size_t max_buffered_bytes = 8u << 20;
  int max_connections = 4096;         // beyond, new connections are closed at once
  int worker_threads = 16;            // run handlers (Post)
};

// Called on the I/O thread for each complete request; answers through the Exchange (at once, or
// later from a worker via Post). Must not block.
using RouteFn = std::function<void(HttpRequest request, std::shared_ptr<Exchange> exchange)>;

// What a ScreenFn decides from a request's header, before its body is read. Either way the body
// is read and dropped (nothing kept, no share of the body budget) instead of kept.
struct Screening {
  // Answered instead of routing: once the body has been dropped, on the same connection (unless
  // the refusal closes it); to a client waiting on `Expect: 100-continue` at once instead of the
  // interim answer, and the connection closed (its body was never asked for).
  std::optional<HttpResponse> refusal;
  bool drop_body = false;  // routed as always, with the body dropped (its route reads none)
};
// Called on the I/O thread when a request's header has arrived and a body is to follow, with
// the request minus its body. The server's API-key check and routes that read no body: clients
// cannot hold the body budget with bodies nothing reads. Must not block.
using ScreenFn = std::function<Screening(const HttpRequest& head)>;

// Thread-safety: Bind, Run and Stop from the owning threads (Run blocks until Stop); Post from
// any thread.
class HttpTransport {
 public:
  HttpTransport(TransportOptions options, RouteFn route, ScreenFn screen = nullptr);
  ~HttpTransport();

  // Binds host:port and listens. Error names the address.
  Status Bind();
  int port() const;
  // Serves until Stop.
  void Run();
  // Stops accepting, closes every connection (their deferred replies and streams are
  // abandoned), and makes Run return.
  void Stop();
  // Runs `work` on a worker thread (exceptions are caught and logged by the caller's wrapper).
  void Post(std::function<void()> work);
  int num_connections() const;
  // Requests read and not yet answered in full: being handled, waiting on the engine, or
  // their response (a stream included) still being written. SIGTERM's drain waits on it.
  int num_unanswered() const;
  // Tasks on the handler threads, queued or running (Post's and the transport's own): Stop
  // joins them all, including those whose clients have left.
  int num_handler_tasks() const;
  // Request-body bytes held against max_pending_body_bytes: being received, or read and not yet
  // done with by their handler.
  size_t pending_body_bytes() const;
  // Request-body bytes read and dropped (Screening) since the transport started.
  uint64_t dropped_body_bytes() const;

  struct Impl;  // the I/O loop, acceptor, workers and connections (http_transport.cc)

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace loom::server
