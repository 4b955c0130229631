// libFuzzer target for the HTTP/1.1 transport (server/http_transport): any bytes a client sends on
// one loopback connection get zero or more responses that each start with a status line, and the
// connection closed within a deadline once the client has sent all and half-closed — never a
// crash, a hang, or a handler handed a body over the limit or an empty method.
//
// The transport runs once per process on a free port with small limits (2 KiB of head, 4 KiB of
// body) and four routes: /now answers at once with the body, /deferred from a worker through
// Defer and Wake, /stream as a chunked stream fed from a worker, anything else 404.
// Input: one mode byte (below), then the raw bytes of the connection. Seeds: corpus/http_transport/; words:
// http_transport.dict.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "../unit/http_feed.h"
#include "server/http_transport.h"

namespace {

using loom::server::Exchange;
using loom::server::Feed;
using loom::server::HttpRequest;
using loom::server::HttpResponse;
using loom::server::HttpTransport;

constexpr size_t kMaxBody = 4096;


HttpTransport* Server() {
  static HttpTransport* server = [] {
    loom::server::TransportOptions o;
    o.host = "127.0.0.1";
    o.port = 0;
    o.max_body_bytes = kMaxBody;
    o.max_header_bytes = 2048;
    o.request_timeout_s = 0.3;  // an unfinished request costs an input this long
    o.write_timeout_s = 2;
    o.worker_threads = 2;
    static HttpTransport* self = nullptr;
    auto* t = new HttpTransport(o, [](HttpRequest req, std::shared_ptr<Exchange> ex) {
      if (req.body.size() > kMaxBody || req.method.empty()) std::abort();
      if (req.path == "/now") {
        HttpResponse r;
        r.content_type = "text/plain";
        r.body = "now:" + req.body;
        ex->Reply(r);
        return;
      }
      if (req.path == "/deferred" || req.path == "/stream") {
        auto feed = std::make_shared<Feed>();
        if (req.path == "/deferred") {
          ex->Defer(feed);
        } else {
          ex->Stream(HttpResponse{}, feed);
        }
        const size_t n = req.body.size();
        self->Post([feed, ex, n] {
          feed->Add("part ", false);
          ex->Wake();
          feed->Add(std::to_string(n), true);
          ex->Wake();
        });
        return;
      }
      HttpResponse r;
      r.status = 404;
      r.body = "{}";
      ex->Reply(r);
    });
    self = t;
    if (!t->Bind().ok()) std::abort();
    return t;
  }();
  // Stopped and joined at exit (before the static destructors Asio's threads could still use),
  // constructed after the transport so that it is destroyed first.
  static struct Runner {
    std::thread thread;
    explicit Runner(HttpTransport* t) : thread([t] { t->Run(); }) {}
    ~Runner() {
      server->Stop();
      thread.join();
    }
  } runner(server);
  return server;
}

// Waits (bounded) until the server holds no connection and no unanswered request, so that no
// work of one input runs into the next.
void WaitIdle(HttpTransport* server) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (server->num_connections() > 0 || server->num_unanswered() > 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      std::fprintf(stderr, "the server kept a connection or a request for 10 s after the client left\n");
      std::abort();
    }
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  // Mode bit: 0 — the client half-closes after its bytes (to the server, a client that left:
  // deferred replies and streams still running are abandoned); 1 — it sends a last request with
  // `Connection: close` instead and waits (the server answers everything it parsed, then closes;
  // or, when the bytes left a request unfinished, its request deadline closes it).
  const bool wait_for_answers = (data[0] & 1) != 0;
  ++data;
  --size;
  HttpTransport* server = Server();
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return 0;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(server->port()));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  static int failed_connects = 0;  // consecutive: an input that tests nothing must not pass quietly
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    ::close(fd);
    if (++failed_connects > 100) {
      std::fprintf(stderr, "no connection to the transport 100 times in a row\n");
      std::abort();
    }
    return 0;
  }
  failed_connects = 0;
  std::string bytes(reinterpret_cast<const char*>(data), size);
  if (wait_for_answers) bytes += "GET /now HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
  // All of it (the server may close early, after a 4xx: the rest is then refused).
  for (size_t sent = 0; sent < bytes.size();) {
    const ssize_t n = ::send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) break;
    sent += static_cast<size_t>(n);
  }
  if (!wait_for_answers) ::shutdown(fd, SHUT_WR);
  std::string got;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  bool closed = false;
  while (std::chrono::steady_clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 50) <= 0) continue;
    char buf[65536];
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) {
      closed = true;
      break;
    }
    got.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  if (!closed) {
    std::fprintf(stderr, "the server kept the connection open for 10 s\n");
    std::abort();
  }
  WaitIdle(server);
  if (!got.empty() && got.rfind("HTTP/1.1 ", 0) != 0 && got.rfind("HTTP/1.0 ", 0) != 0) {
    std::fprintf(stderr, "a response without a status line: %.80s\n", got.c_str());
    std::abort();
  }
  return 0;
}
