// The HTTP transport tests' fixture: a transport on a free port whose routes hand the test a Feed,
// and raw-socket client helpers.
#pragma once

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <future>
#include <mutex>
#include <string>
#include <thread>

#include "server/http_transport.h"
#include "unit/http_feed.h"

namespace loom::server {

inline int Connect(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  return fd;
}

inline void Send(int fd, const std::string& s) {
  ASSERT_EQ(::send(fd, s.data(), s.size(), MSG_NOSIGNAL), static_cast<ssize_t>(s.size()));
}

// Reads until `done(data)` or the peer closes or `timeout` passes.
template <typename Done>
inline std::string ReadUntil(int fd, Done done,
                             std::chrono::milliseconds timeout = std::chrono::milliseconds(5000)) {
  std::string data;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!done(data) && std::chrono::steady_clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 20) <= 0) continue;
    char buf[65536];
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) break;
    data.append(buf, static_cast<size_t>(n));
  }
  return data;
}

inline std::string ReadAll(int fd) {
  return ReadUntil(fd, [](const std::string&) { return false; });
}

inline bool Contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// A connection that sends `raw` and reads until the server closes it (or ReadUntil's timeout).
inline std::string SendAndReadAll(int port, const std::string& raw) {
  const int fd = Connect(port);
  Send(fd, raw);
  std::string got = ReadAll(fd);
  ::close(fd);
  return got;
}

// Whether the server closed `fd` within `timeout` (reads and drops what comes first).
inline bool ClosedWithin(int fd, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 20) <= 0) continue;
    char buf[4096];
    if (::recv(fd, buf, sizeof(buf), 0) <= 0) return true;
  }
  return false;
}

// A transport on a free port whose routes the test sets: /now answers at once, /deferred and
// /stream hand the test the exchange and a Feed.
class TransportTest : public ::testing::Test {
 protected:
  void Start(TransportOptions o = {}, ScreenFn screen = nullptr) {
    o.host = "127.0.0.1";
    o.port = 0;
    transport_ = std::make_unique<HttpTransport>(
        o,
        [this](HttpRequest req, std::shared_ptr<Exchange> ex) {
          if (req.path == "/now") {
            HttpResponse r;
            r.content_type = "text/plain";
            r.body = "now:" + req.body;
            ex->Reply(r);
            ex->Reply(r);  // a second answer is ignored
            return;
          }
          if (req.path ==
              "/queued") {  // as the server's routes: the request goes to a handler thread
            transport_->Post([this, req = std::move(req), ex]() mutable {
              {
                const HttpRequest held =
                    std::move(req);  // the handler has the request until it ends
                handlers_holding_.fetch_add(1);
                gate_.wait();
              }
              HttpResponse r;
              r.content_type = "text/plain";
              r.body = "handled";
              ex->Reply(r);  // after the request (and its body) went
            });
            return;
          }
          // As the server's handlers: the exchange is not kept once answered (the engine's wake
          // holds a weak reference), except by a handler still working (/slow).
          std::lock_guard<std::mutex> lock(mu_);
          exchange_ = ex;
          if (req.path == "/slow") held_ = ex;
          feed_ = std::make_shared<Feed>();
          if (req.path == "/deferred") ex->Defer(feed_);
          if (req.path == "/stream") ex->Stream(HttpResponse{}, feed_);
        },
        std::move(screen));
    ASSERT_TRUE(transport_->Bind().ok());
    runner_ = std::thread([this] { transport_->Run(); });
  }
  void TearDown() override {
    OpenGate();  // Stop waits for the handlers
    if (transport_) transport_->Stop();
    if (runner_.joinable()) runner_.join();
  }
  // The feed of the latest /deferred or /stream request (waits for it).
  std::shared_ptr<Feed> WaitFeed(std::shared_ptr<Feed> previous = nullptr) {
    for (int i = 0; i < 500; ++i) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (feed_ && feed_ != previous) return feed_;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ADD_FAILURE() << "no request reached the route";
    return std::make_shared<Feed>();
  }
  void Wake() {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto ex = exchange_.lock()) ex->Wake();
  }
  // Adds 16 KiB events to the stream every 2 ms, waking it, until it is abandoned (64 MiB at most).
  void FeedUntilAbandoned(Feed& feed) {
    const std::string piece(16 << 10, 'y');
    for (int i = 0; i < 4000 && feed.abandoned.load() == 0; ++i) {
      feed.Add(piece, false);
      Wake();
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  }
  int port() const { return transport_->port(); }
  // Lets /queued handlers end (once).
  void OpenGate() {
    if (!gate_opened_.exchange(true)) open_gate_.set_value();
  }

  std::unique_ptr<HttpTransport> transport_;
  std::thread runner_;
  std::mutex mu_;
  std::weak_ptr<Exchange> exchange_;
  std::shared_ptr<Exchange> held_;
  std::shared_ptr<Feed> feed_;
  std::promise<void> open_gate_;
  std::shared_future<void> gate_ = open_gate_.get_future().share();
  std::atomic<bool> gate_opened_{false};
  std::atomic<int> handlers_holding_{0};  // /queued handlers that took their request
};

inline const std::string kGetDeferred = "GET /deferred HTTP/1.1\r\nHost: x\r\n\r\n";
inline const std::string kGetStream = "GET /stream HTTP/1.1\r\nHost: x\r\n\r\n";

}  // namespace loom::server
