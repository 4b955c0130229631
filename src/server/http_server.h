// HttpServer: the routes of `loom serve` — auth, limits, health, models, adapters, metrics.
#pragma once

#include <memory>

#include "server/http_exchange.h"
#include "server/http_transport.h"
#include "server/server_context.h"

namespace loom::server {

// Thread-safety: Bind/Listen/Stop from the owning threads; routing runs on the transport's I/O
// thread, generation and adapter handlers on its workers; they reach the model only through
// ServerContext (the engine runs on its own thread).
class HttpServer {
 public:
  explicit HttpServer(ServerContext* ctx);
  ~HttpServer();

  // Binds host:port (port 0 picks a free one). Error names the address.
  Status Bind();
  int port() const { return transport_->port(); }
  int num_unanswered() const { return transport_->num_unanswered(); }
  int num_handler_tasks() const { return transport_->num_handler_tasks(); }
  // Serves until Stop (blocking).
  void Listen();
  // Closes every connection (streams still open are cut) and makes Listen return.
  void Stop();

 private:
  void Route(HttpRequest req, std::shared_ptr<Exchange> ex);

  ServerContext* ctx_;
  std::unique_ptr<HttpTransport> transport_;
};

}  // namespace loom::server
