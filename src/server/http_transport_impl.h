// HttpTransport's insides shared by its two files: the transport's state (Impl) and what the
// listener (http_transport.cc) asks of a connection (http_session.cc).
#pragma once

#include <utility>  // before Boost: asio/awaitable.hpp uses std::exchange without it

#include <array>
#include <atomic>
#include <boost/asio.hpp>
#include <cstdio>
#include <functional>
#include <memory>
#include <unordered_map>

#include "server/http_body.h"
#include "server/http_transport.h"
#include "server/worker_pool.h"

namespace loom::server {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using error_code = boost::system::error_code;

class Session;

struct HttpTransport::Impl {
  TransportOptions options;
  RouteFn route;
  ScreenFn screen;  // may be empty
  // Before ioc: sessions that ioc's destructor frees (their handlers never ran after Stop) give
  // their reserved body bytes back to it.
  // Its last 1/16 (32 MiB of the default 512 MiB) for bodies of at most 64 KiB, as far as one
  // largest body still fits beside it.
  BodyBudget body_budget{
      std::max(options.max_pending_body_bytes, options.max_body_bytes),
      std::min(std::max(options.max_pending_body_bytes, options.max_body_bytes) / 16,
               std::max(options.max_pending_body_bytes, options.max_body_bytes) -
                   options.max_body_bytes)};
  asio::io_context ioc;
  tcp::acceptor acceptor{ioc};
  asio::steady_timer accept_backoff{ioc};
  WorkerPool workers;
  std::unordered_map<Session*, std::weak_ptr<Session>> sessions;  // I/O thread only
  std::atomic<int> num_connections{0};
  std::atomic<int> num_unanswered{0};  // sessions between a request read and its answer written
  std::atomic<uint64_t> dropped_body_bytes{0};  // bodies read and dropped (Screening)
  int port = 0;
  bool stopped = false;
  // Where lingering connections' input is read and dropped (one for all: the bytes are
  // never looked at).
  std::array<char, 16384> discard;

  // Tasks posted to the handler threads and not yet done (queued or running): a handler whose
  // client has left is no longer counted in num_unanswered, yet joining the pool waits for it.
  std::atomic<int> num_handler_tasks{0};
  void workers_post(std::function<void()> work) {
    num_handler_tasks.fetch_add(1);
    struct Done {
      std::atomic<int>* n;
      ~Done() { n->fetch_sub(1); }
    };
    try {
      asio::post(workers.context(), [this, work = std::move(work)]() mutable {
        Done done{&num_handler_tasks};
        // Whatever escapes a task ends the process (asio's pool calls std::terminate): the
        // handlers answer their own errors, so what gets here is the answering failing too
        // (out of memory twice).
        try {
          work();
        } catch (const std::exception& e) {
          std::fprintf(stderr, "loom: HTTP handler failed: %s\n", e.what());
        } catch (...) {
          std::fprintf(stderr, "loom: HTTP handler failed\n");
        }
      });
    } catch (...) {  // not posted (an allocation failed): not counted
      num_handler_tasks.fetch_sub(1);
      throw;
    }
  }

  Impl(TransportOptions o, RouteFn r, ScreenFn s)
      : options(std::move(o)),
        route(std::move(r)),
        screen(std::move(s)),
        workers(std::max(1, options.worker_threads)) {}
  void Accept();
};

// A new connection: registered in owner->sessions and reading its first request.
void StartSession(tcp::socket socket, HttpTransport::Impl* owner);
// Closes a connection (on the I/O thread).
void CloseSession(Session& session);

}  // namespace loom::server
