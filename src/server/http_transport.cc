// HttpTransport: the listener (bind, accept up to --max-connections, run, stop) on Boost.Asio;
// one I/O thread for all connections (http_session.cc), a worker pool for handlers.
#include "server/http_transport.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/resource.h>
#include <sys/socket.h>

#include <utility>  // before Boost: asio/awaitable.hpp uses std::exchange without it
#include <boost/asio.hpp>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <future>
#include <string>
#include <vector>

#include "server/api_error.h"
#include "server/http_transport_impl.h"

namespace loom::server {

void HttpTransport::Impl::Accept() {
  acceptor.async_accept([this](error_code ec, tcp::socket socket) {
    if (!acceptor.is_open()) return;
    if (ec) {
      // Out of descriptors (EMFILE) or memory: retry shortly instead of spinning.
      accept_backoff.expires_after(std::chrono::milliseconds(50));
      accept_backoff.async_wait([this](error_code e) {
        if (!e) Accept();
      });
      return;
    }
    if (num_connections.load() >= options.max_connections) {
      // An OpenAI error object, as every other error (built once: no request is read).
      static const std::string kBusy = [] {
        const std::string body =
            ApiError{503, "the server has too many open connections; retry later", "", ""}.Body();
        return "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 1\r\n"
               "Connection: close\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
      }();
      ::send(socket.native_handle(), kBusy.data(), kBusy.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
      error_code ignored;
      socket.close(ignored);
    } else {
      error_code ignored;
      socket.set_option(tcp::no_delay(true), ignored);  // replies are written whole; no Nagle wait
      try {
        StartSession(std::move(socket), this);
      } catch (const std::exception& e) {  // out of memory: this connection is dropped, not
        std::fprintf(stderr, "loom: HTTP connection refused: %s\n", e.what());  // the listener
      } catch (...) {
        std::fprintf(stderr, "loom: HTTP connection refused\n");
      }
    }
    // Re-armed whatever happened above; if even that fails (out of memory), a second later.
    try {
      Accept();
    } catch (...) {
      std::fprintf(stderr, "loom: HTTP listener: re-arming failed; retrying in 1 s\n");
      try {
        accept_backoff.expires_after(std::chrono::seconds(1));
        accept_backoff.async_wait([this](error_code e) {
          if (!e) Accept();
        });
      } catch (...) {
        std::fprintf(stderr, "loom: HTTP listener: cannot re-arm; no new connections are taken\n");
      }
    }
  });
}

HttpTransport::HttpTransport(TransportOptions options, RouteFn route, ScreenFn screen)
    : impl_(std::make_unique<Impl>(std::move(options), std::move(route), std::move(screen))) {}

HttpTransport::~HttpTransport() {
  try {  // a destructor: nothing may leave it
    Stop();
  } catch (...) {
  }
}

Status HttpTransport::Bind() {
  TransportOptions& o = impl_->options;
  // Each connection is a descriptor: raise the soft limit toward --max-connections (+ 256 for
  // the process's own files), as far as the hard limit allows. Where it cannot reach, fewer
  // connections are taken, so the ones beyond still get their 503 (before, past the limit
  // accept failed and retried, and new clients hung without a word).
  rlimit files{};
  if (::getrlimit(RLIMIT_NOFILE, &files) == 0) {
    const rlim_t wanted = static_cast<rlim_t>(o.max_connections) + 256;
    if (files.rlim_cur < wanted) {
      files.rlim_cur = std::min(wanted, files.rlim_max);
      ::setrlimit(RLIMIT_NOFILE, &files);
      ::getrlimit(RLIMIT_NOFILE, &files);
    }
    if (files.rlim_cur != RLIM_INFINITY && files.rlim_cur < wanted) {
      const rlim_t reserve = std::min<rlim_t>(256, files.rlim_cur / 4);
      const int fit = static_cast<int>(std::min<rlim_t>(
          static_cast<rlim_t>(o.max_connections), std::max<rlim_t>(1, files.rlim_cur - reserve)));
      if (fit < o.max_connections) {
        std::fprintf(
            stderr,
            "loom: warning: --max-connections %d needs %llu file descriptors and the limit "
            "(ulimit -n) is %llu: taking at most %d connections (beyond them, 503)\n",
            o.max_connections, static_cast<unsigned long long>(wanted),
            static_cast<unsigned long long>(files.rlim_cur), fit);
        o.max_connections = fit;
      }
    }
  }
  const std::string where = o.host + ":" + std::to_string(o.port);
  error_code ec;
  tcp::resolver resolver(impl_->ioc);
  auto results = resolver.resolve(o.host, std::to_string(o.port), tcp::resolver::passive, ec);
  if (ec || results.empty()) return Unavailable("cannot resolve " + o.host + ": " + ec.message());
  const tcp::endpoint endpoint = results.begin()->endpoint();
  tcp::acceptor& a = impl_->acceptor;
  a.open(endpoint.protocol(), ec);
  if (!ec) a.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) a.bind(endpoint, ec);
  if (!ec) a.listen(SOMAXCONN, ec);
  if (ec) {
    error_code ignored;
    a.close(ignored);
    return Unavailable("cannot bind " + where + " (" + ec.message() +
                       "; in use, or not an address of this machine)");
  }
  impl_->port = a.local_endpoint().port();
  return OkStatus();
}

int HttpTransport::port() const { return impl_->port; }

int HttpTransport::num_connections() const { return impl_->num_connections.load(); }

int HttpTransport::num_unanswered() const { return impl_->num_unanswered.load(); }

void HttpTransport::Run() {
  if (!impl_->acceptor.is_open()) return;
  impl_->Accept();
  // No exception may end the I/O thread (and with it every connection). Connections' handlers
  // close their own connection on one (Session::Safely) and the listener re-arms; anything
  // that still gets here is reported and the loop goes on.
  for (;;) {
    try {
      impl_->ioc.run();
      return;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "loom: HTTP I/O error, connection dropped: %s\n", e.what());
    } catch (...) {
      std::fprintf(stderr, "loom: HTTP I/O error, connection dropped\n");
    }
  }
}

void HttpTransport::Stop() {
  if (impl_->stopped) return;
  impl_->stopped = true;
  // Close the acceptor and every connection on the I/O thread; give it a second (Run may not
  // have started, or have returned).
  // (If that cannot be posted — out of memory — the loop is stopped all the same: a Stop that
  // threw here left stopped set and the I/O thread running, and joining it hung.)
  try {
    auto closed = std::make_shared<std::promise<void>>();
    auto done = closed->get_future();
    asio::post(impl_->ioc, [this, closed] {
      error_code ignored;
      impl_->acceptor.close(ignored);
      impl_->accept_backoff.cancel();
      std::vector<std::shared_ptr<Session>> open;
      for (auto& [ptr, weak] : impl_->sessions) {
        if (auto s = weak.lock()) open.push_back(std::move(s));
      }
      for (auto& s : open) CloseSession(*s);
      closed->set_value();
    });
    done.wait_for(std::chrono::seconds(1));
  } catch (...) {
    std::fprintf(stderr, "loom: HTTP stop: connections not closed first (out of memory)\n");
  }
  impl_->ioc.stop();
  // Handlers still running finish (they answer into the stopped loop, which drops it).
  impl_->workers.Join();
}

void HttpTransport::Post(std::function<void()> work) { impl_->workers_post(std::move(work)); }
int HttpTransport::num_handler_tasks() const { return impl_->num_handler_tasks.load(); }

size_t HttpTransport::pending_body_bytes() const { return impl_->body_budget.used(); }

uint64_t HttpTransport::dropped_body_bytes() const { return impl_->dropped_body_bytes.load(); }

}  // namespace loom::server
