// HttpServer: the routes of `loom serve` on cpp-httplib — auth, limits, health, models, adapters, metrics.
#pragma once

#include <memory>
#include <string>

#include "server/server_context.h"

namespace httplib {
class Server;
}

namespace loom::server {

// Thread-safety: Bind/Listen/Stop from the owning thread; handlers run on httplib's pool and
// reach the model only through ServerContext (engine on its own thread).
class HttpServer {
 public:
  explicit HttpServer(ServerContext* ctx);
  ~HttpServer();

  // Binds host:port (port 0 picks a free one). Error names the address.
  Status Bind();
  int port() const { return port_; }
  // Serves until Stop (blocking).
  void Listen();
  void Stop();

 private:
  void Routes();

  ServerContext* ctx_;
  std::unique_ptr<httplib::Server> http_;
  int port_ = 0;
  int listen_fd_ = -1;  // the listening socket (to raise its backlog)
};

}  // namespace loom::server
