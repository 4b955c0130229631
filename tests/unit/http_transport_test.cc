// HttpTransport on loopback with raw sockets: deferred replies, streams woken from other
// threads, disconnects abandoning work, deadlines, limits, pipelining and Stop.
#include "server/http_transport.h"

#include <arpa/inet.h>
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

#include <gtest/gtest.h>

#include "unit/http_feed.h"

namespace loom::server {
namespace {

using namespace std::chrono_literals;

int Connect(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  return fd;
}

void Send(int fd, const std::string& s) {
  ASSERT_EQ(::send(fd, s.data(), s.size(), MSG_NOSIGNAL), static_cast<ssize_t>(s.size()));
}

// Reads until `done(data)` or the peer closes or `timeout` passes.
template <typename Done>
std::string ReadUntil(int fd, Done done, std::chrono::milliseconds timeout = 5000ms) {
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

std::string ReadAll(int fd) {
  return ReadUntil(fd, [](const std::string&) { return false; });
}

bool Contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// A connection that sends `raw` and reads until the server closes it (or ReadUntil's timeout).
std::string SendAndReadAll(int port, const std::string& raw) {
  const int fd = Connect(port);
  Send(fd, raw);
  std::string got = ReadAll(fd);
  ::close(fd);
  return got;
}

// Whether the server closed `fd` within `timeout` (reads and drops what comes first).
bool ClosedWithin(int fd, std::chrono::milliseconds timeout) {
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
  void Start(TransportOptions o = {}) {
    o.host = "127.0.0.1";
    o.port = 0;
    transport_ = std::make_unique<HttpTransport>(o, [this](HttpRequest req, std::shared_ptr<Exchange> ex) {
      if (req.path == "/now") {
        HttpResponse r;
        r.content_type = "text/plain";
        r.body = "now:" + req.body;
        ex->Reply(r);
        ex->Reply(r);  // a second answer is ignored
        return;
      }
      if (req.path == "/queued") {  // as the server's routes: the request goes to a handler thread
        transport_->Post([this, req = std::move(req), ex]() mutable {
          {
            const HttpRequest held = std::move(req);  // the handler has the request until it ends
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
    });
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
      std::this_thread::sleep_for(10ms);
    }
    ADD_FAILURE() << "no request reached the route";
    return std::make_shared<Feed>();
  }
  void Wake() {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto ex = exchange_.lock()) ex->Wake();
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

const std::string kGetDeferred = "GET /deferred HTTP/1.1\r\nHost: x\r\n\r\n";
const std::string kGetStream = "GET /stream HTTP/1.1\r\nHost: x\r\n\r\n";

TEST_F(TransportTest, DeferredReplyWakesFromAnotherThreadAndKeepsTheConnection) {
  Start();
  const int fd = Connect(port());
  Send(fd, kGetDeferred);
  auto feed = WaitFeed();
  std::thread([&] {
    std::this_thread::sleep_for(50ms);
    feed->Add("done later", true);
    Wake();
  }).join();
  std::string got = ReadUntil(fd, [](const std::string& d) { return Contains(d, "done later"); });
  EXPECT_TRUE(got.rfind("HTTP/1.1 200 OK\r\n", 0) == 0) << got;
  EXPECT_TRUE(Contains(got, "Content-Length: 10\r\n")) << got;
  // The same connection serves the next request, and a doubled Reply sent nothing extra.
  Send(fd, "POST /now HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc");
  got = ReadUntil(fd, [](const std::string& d) { return Contains(d, "now:abc"); });
  EXPECT_TRUE(Contains(got, "now:abc")) << got;
  EXPECT_EQ(got.find("HTTP/1.1", 1), std::string::npos) << got;
  EXPECT_EQ(feed->abandoned.load(), 0);
  ::close(fd);
}

TEST_F(TransportTest, StreamIsChunkedAndEndsWithTheLastChunk) {
  Start();
  const int fd = Connect(port());
  Send(fd, kGetStream);
  auto feed = WaitFeed();
  std::thread feeder([&] {
    for (int i = 0; i < 20; ++i) {
      feed->Add("event " + std::to_string(i) + "\n", i == 19);
      Wake();
      std::this_thread::sleep_for(2ms);
    }
  });
  const std::string got = ReadUntil(fd, [](const std::string& d) { return Contains(d, "\r\n0\r\n\r\n"); });
  feeder.join();
  EXPECT_TRUE(Contains(got, "Transfer-Encoding: chunked\r\n")) << got;
  // De-chunk the body: every event, in order.
  std::string body;
  size_t at = got.find("\r\n\r\n") + 4;
  while (at < got.size()) {
    const size_t eol = got.find("\r\n", at);
    ASSERT_NE(eol, std::string::npos);
    const size_t n = std::stoul(got.substr(at, eol - at), nullptr, 16);
    if (n == 0) break;
    body += got.substr(eol + 2, n);
    at = eol + 2 + n + 2;
  }
  std::string want;
  for (int i = 0; i < 20; ++i) want += "event " + std::to_string(i) + "\n";
  EXPECT_EQ(body, want);
  ::close(fd);
}

// A chunk the source calls large (an echo's prompt log-probs, megabytes of JSON) is pulled on a
// worker thread, not the I/O thread every other connection on it waits for; what arrives while
// the worker pulls is sent after it, in order, without another wake.
TEST_F(TransportTest, ALargeStreamChunkIsPulledOffTheIoThread) {
  Start();
  const int fd = Connect(port());
  Send(fd, kGetStream);
  auto feed = WaitFeed();
  feed->Add("a\n", false);
  Wake();
  ASSERT_TRUE(Contains(ReadUntil(fd, [](const std::string& d) { return Contains(d, "a\n"); }), "a\n"));
  feed->large_pull_ms = 300;
  feed->large = true;
  feed->Add("b\n", false);
  Wake();
  // Inside the worker's Pull (it took "b" and sleeps 300 ms there); waited for, not assumed
  // after a fixed sleep (a busy machine started the worker later: "c" went with "b").
  for (int i = 0; i < 1000; ++i) {
    {
      std::lock_guard<std::mutex> lock(feed->mu);
      if (feed->large_on != std::thread::id()) break;
    }
    std::this_thread::sleep_for(10ms);
  }
  feed->Add("c\n", true);
  Wake();  // while it pulls: not a second Pull at once, and not lost
  const std::string got =
      ReadUntil(fd, [](const std::string& d) { return Contains(d, "\r\n0\r\n\r\n"); });
  EXPECT_TRUE(Contains(got, "b\n")) << got;
  EXPECT_LT(got.find("b\n"), got.find("c\n")) << got;
  EXPECT_TRUE(Contains(got, "\r\n0\r\n\r\n")) << got;
  std::lock_guard<std::mutex> lock(feed->mu);
  ASSERT_GE(feed->pulled_on.size(), 3u);  // the I/O thread pulled first (the head, "a")
  EXPECT_NE(feed->large_on, feed->pulled_on[0]);  // the large one: a worker
  EXPECT_EQ(feed->pulled_on.back(), feed->pulled_on[0]);  // then the I/O thread again
  ::close(fd);
}

TEST_F(TransportTest, ClientThatLeavesAbandonsDeferredAndStream) {
  Start();
  for (const std::string& request : {kGetDeferred, kGetStream}) {
    std::shared_ptr<Feed> before;  // read before sending: the route may answer at once
    {
      std::lock_guard<std::mutex> lock(mu_);
      before = feed_;
    }
    const int fd = Connect(port());
    Send(fd, request);
    auto feed = WaitFeed(before);
    ::close(fd);
    for (int i = 0; i < 300 && feed->abandoned.load() == 0; ++i) std::this_thread::sleep_for(10ms);
    EXPECT_EQ(feed->abandoned.load(), 1) << request;
    // Waking a closed exchange is harmless.
    feed->Add("late", true);
    Wake();
  }
  for (int i = 0; i < 300 && transport_->num_connections() > 0; ++i) std::this_thread::sleep_for(10ms);
  EXPECT_EQ(transport_->num_connections(), 0);
}

TEST_F(TransportTest, AnswerAfterTheClientLeftIsAbandonedAtOnce) {
  Start();
  const int fd = Connect(port());
  Send(fd, "GET /slow HTTP/1.1\r\n\r\n");  // the handler is still working
  auto feed = WaitFeed();
  ::close(fd);
  for (int i = 0; i < 300 && transport_->num_connections() > 0; ++i) std::this_thread::sleep_for(10ms);
  ASSERT_EQ(transport_->num_connections(), 0);
  // It answers only now: its work (sequences, in the server) is cancelled at once.
  held_->Defer(feed);
  for (int i = 0; i < 300 && feed->abandoned.load() == 0; ++i) std::this_thread::sleep_for(10ms);
  EXPECT_EQ(feed->abandoned.load(), 1);
  // A second answer (a handler bug) is abandoned too, never written.
  auto twice = std::make_shared<Feed>();
  held_->Stream(HttpResponse{}, twice);
  for (int i = 0; i < 300 && twice->abandoned.load() == 0; ++i) std::this_thread::sleep_for(10ms);
  EXPECT_EQ(twice->abandoned.load(), 1);
}

TEST_F(TransportTest, OneDeadlineForTheWholeRequest) {
  TransportOptions o;
  o.request_timeout_s = 0.3;
  Start(o);
  const int fd = Connect(port());
  Send(fd, "GET /now HTTP/1.1\r\n");
  bool closed = false;
  for (int i = 0; i < 40 && !closed; ++i) {  // a header line every 50 ms: still one deadline
    if (::send(fd, "X: y\r\n", 6, MSG_NOSIGNAL) < 0) break;
    closed = ClosedWithin(fd, 50ms);
  }
  EXPECT_TRUE(closed || ClosedWithin(fd, 100ms));
  ::close(fd);
  // An idle kept-alive connection is closed at the deadline too.
  const int idle = Connect(port());
  EXPECT_TRUE(ClosedWithin(idle, 3000ms));
  ::close(idle);
}

TEST_F(TransportTest, HeaderAndBodyLimits) {
  TransportOptions o;
  o.max_header_bytes = 1024;
  o.max_body_bytes = 100;
  Start(o);
  int fd = Connect(port());
  std::string many = "GET /now HTTP/1.1\r\n";
  for (int i = 0; i < 200; ++i) many += "X-H" + std::to_string(i) + ": v\r\n";
  Send(fd, many);  // never terminated: refused once the limit is passed
  std::string got = ReadAll(fd);
  EXPECT_TRUE(got.rfind("HTTP/1.1 431", 0) == 0) << got;
  EXPECT_TRUE(Contains(got, "Connection: close")) << got;
  ::close(fd);
  fd = Connect(port());
  Send(fd, "POST /now HTTP/1.1\r\nContent-Length: 101\r\n\r\n");
  got = ReadAll(fd);
  EXPECT_TRUE(got.rfind("HTTP/1.1 413", 0) == 0) << got;
  ::close(fd);
  // A chunked body is bounded as it is read.
  fd = Connect(port());
  Send(fd, "POST /now HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n64\r\n" + std::string(100, 'a') +
               "\r\n1\r\nb\r\n0\r\n\r\n");
  got = ReadAll(fd);
  EXPECT_TRUE(got.rfind("HTTP/1.1 413", 0) == 0) << got;
  ::close(fd);
}

TEST_F(TransportTest, FramingErrorsAre400AndClose) {
  Start();
  for (const std::string& bad :
       {std::string("POST /now HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd"),
        std::string("POST /now HTTP/1.1\r\nContent-Length: +3\r\n\r\nabc"),
        std::string("POST /now HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"),
        std::string("GET /now HTTP/9.9\r\n\r\n"), std::string("\x00\xff\r\n\r\n", 6)}) {
    const std::string got = SendAndReadAll(port(), bad);
    EXPECT_TRUE(got.rfind("HTTP/1.1 400", 0) == 0) << bad << " → " << got;
    EXPECT_TRUE(Contains(got, "Connection: close")) << got;
  }
}

TEST_F(TransportTest, PipelinedRequestsInOrder) {
  Start();
  const std::string got = SendAndReadAll(
      port(), "POST /now HTTP/1.1\r\nContent-Length: 1\r\n\r\n1POST /now HTTP/1.1\r\nContent-Length: 1\r\n\r\n2"
              "GET /now HTTP/1.1\r\nConnection: close\r\n\r\n");
  const size_t a = got.find("now:1"), b = got.find("now:2"), c = got.find("now:", b + 1);
  ASSERT_NE(a, std::string::npos) << got;
  ASSERT_NE(b, std::string::npos) << got;
  EXPECT_LT(a, b);
  EXPECT_NE(c, std::string::npos) << got;
}

// RFC 9112 §2.2: empty lines before a request line are ignored (llhttp, vLLM's parser, does),
// whether they come with the request, on their own, or after a body; only empty lines past the
// header limit are a 400 and a close.
TEST_F(TransportTest, EmptyLinesBeforeARequestAreIgnored) {
  TransportOptions o;
  o.max_header_bytes = 4096;
  Start(o);
  int fd = Connect(port());
  Send(fd, "\r\n\nPOST /now HTTP/1.1\r\nContent-Length: 1\r\n\r\n1\r\n");
  std::string got = ReadUntil(fd, [](const std::string& d) { return Contains(d, "now:1"); });
  EXPECT_TRUE(Contains(got, "200 OK") && Contains(got, "now:1")) << got;
  Send(fd, "\r\n");  // alone, then the next request in a later packet
  std::this_thread::sleep_for(50ms);
  Send(fd, "\r");
  std::this_thread::sleep_for(50ms);
  Send(fd, "\nPOST /now HTTP/1.1\r\nContent-Length: 1\r\nConnection: close\r\n\r\n2");
  got = ReadAll(fd);
  EXPECT_TRUE(Contains(got, "200 OK") && Contains(got, "now:2")) << got;
  ::close(fd);
  fd = Connect(port());
  Send(fd, std::string(5000, '\n'));
  got = ReadUntil(fd, [](const std::string& d) { return Contains(d, "only empty lines"); });
  EXPECT_TRUE(Contains(got, "400 Bad Request") && Contains(got, "only empty lines")) << got;
  EXPECT_TRUE(ClosedWithin(fd, 3000ms));
  ::close(fd);
}

// Review finding: a request pipelined behind a deferred reply (more than Beast's first read)
// left the session without an owner: destroyed without Close, its work never abandoned and its
// connection never uncounted (enough of them and every new connection got 503).
TEST_F(TransportTest, PipelinedBytesBehindADeferredReply) {
  Start();
  const std::string next = "POST /now HTTP/1.1\r\nContent-Length: 1000\r\n\r\n" + std::string(1000, 'p');
  // Answered in order once the deferred reply is.
  int fd = Connect(port());
  Send(fd, kGetDeferred + next);
  auto feed = WaitFeed();
  std::this_thread::sleep_for(50ms);
  feed->Add("first", true);
  Wake();
  std::string got = ReadUntil(fd, [](const std::string& d) { return Contains(d, "now:pppp"); });
  EXPECT_LT(got.find("first"), got.find("now:p")) << got;
  ::close(fd);
  // The client leaves (after `settle`) while its reply is awaited: the reply is abandoned and
  // the connection uncounted.
  auto leaves = [&](int client, const std::shared_ptr<Feed>& waiting, std::chrono::milliseconds settle) {
    std::this_thread::sleep_for(settle);
    ::close(client);
    for (int i = 0; i < 500 && waiting->abandoned.load() == 0; ++i) std::this_thread::sleep_for(10ms);
    EXPECT_EQ(waiting->abandoned.load(), 1);
    for (int i = 0; i < 300 && transport_->num_connections() > 0; ++i) std::this_thread::sleep_for(10ms);
    EXPECT_EQ(transport_->num_connections(), 0);
  };
  fd = Connect(port());
  Send(fd, kGetDeferred + next);
  auto second = WaitFeed(feed);
  leaves(fd, second, 50ms);
  // More pipelined than the input buffer holds (the server stops reading: TCP holds the
  // rest): the session lives on, answers both in order, and is uncounted when it ends.
  const std::string big = "POST /now HTTP/1.1\r\nContent-Length: 300000\r\nConnection: close\r\n\r\n" +
                          std::string(300000, 'y');
  fd = Connect(port());
  std::thread sender([&] { ::send(fd, (kGetDeferred + big).data(), kGetDeferred.size() + big.size(), MSG_NOSIGNAL); });
  auto third = WaitFeed(second);
  std::this_thread::sleep_for(100ms);
  third->Add("third", true);
  Wake();
  got = ReadAll(fd);
  sender.join();
  EXPECT_TRUE(Contains(got, "third")) << got.substr(0, 300);
  EXPECT_TRUE(Contains(got, "now:yyyy")) << got.substr(0, 300);
  ::close(fd);
  for (int i = 0; i < 300 && transport_->num_connections() > 0; ++i) std::this_thread::sleep_for(10ms);
  EXPECT_EQ(transport_->num_connections(), 0);
  // The client leaves behind more pipelined input than the buffer holds (the rest, and the
  // client's FIN, in the server's socket): the socket stays readable, so the TCP state tells;
  // the waiting reply is abandoned and the connection uncounted. (With the server's receive
  // window full too, the FIN waits behind the data and nothing can tell.)
  const std::string mid = "POST /now HTTP/1.1\r\nContent-Length: 150000\r\n\r\n" + std::string(150000, 'm');
  fd = Connect(port());
  Send(fd, kGetDeferred + mid);
  auto fourth = WaitFeed(third);
  leaves(fd, fourth, 100ms);
}

// Review findings: a Transfer-Encoding other than chunked framed the body as empty (its bytes
// became the next request), and unparsed input (a chunk size line's extensions) was unbounded.
TEST_F(TransportTest, TransferEncodingOtherThanChunkedAndHugeChunkLinesAreRefused) {
  Start();
  // A coding loom does not implement is 501 (RFC 9112 §6.1); a malformed framing is 400.
  const std::pair<std::string, const char*> cases[] = {
      {"POST /now HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\nGET /smuggled HTTP/1.1\r\n\r\n", "501"},
      {"POST /now HTTP/1.1\r\nTransfer-Encoding: identity\r\nContent-Length: 1\r\n\r\nx", "400"},
      {"POST /now HTTP/1.1\r\nTransfer-Encoding: chunked, gzip\r\n\r\n0\r\n\r\n", "501"},
      {"POST /now HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n", "501"},
      {"POST /now HTTP/1.1\r\nTransfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", "501"},
      {"POST /now HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n1;" + std::string(300000, 'e'), "400"}};
  for (const auto& [bad, status] : cases) {
    const int fd = Connect(port());
    ::send(fd, bad.data(), bad.size(), MSG_NOSIGNAL);
    const std::string got = ReadAll(fd);
    EXPECT_EQ(got.rfind(std::string("HTTP/1.1 ") + status, 0), 0u)
        << bad.substr(0, 80) << " → " << got;
    EXPECT_EQ(got.find("HTTP/1.1", 1), std::string::npos) << got;
    ::close(fd);
  }
}

// Second review: answers carried no request number, so a late answer for an earlier request on
// the connection could be taken as the current one's.
TEST_F(TransportTest, LateAnswerForAnEarlierRequestIsDropped) {
  Start();
  const int fd = Connect(port());
  Send(fd, "GET /slow HTTP/1.1\r\n\r\n");
  auto first = WaitFeed();
  std::shared_ptr<Exchange> old = held_;
  old->Reply(HttpResponse{});  // answers the first request
  ReadUntil(fd, [](const std::string& d) { return Contains(d, "\r\n\r\n"); });
  Send(fd, "GET /slow HTTP/1.1\r\n\r\n");  // the second: its handler is still working
  WaitFeed(first);
  HttpResponse stale;
  stale.body = "stale";
  old->Reply(stale);  // the first request's exchange, answering again: dropped
  auto stale_stream = std::make_shared<Feed>();
  old->Stream(HttpResponse{}, stale_stream);
  std::this_thread::sleep_for(100ms);
  HttpResponse fresh;
  fresh.body = "fresh";
  held_->Reply(fresh);
  const std::string got = ReadUntil(fd, [](const std::string& d) { return Contains(d, "fresh"); });
  EXPECT_TRUE(Contains(got, "fresh")) << got;
  EXPECT_FALSE(Contains(got, "stale")) << got;
  EXPECT_EQ(stale_stream->abandoned.load(), 1);
  ::close(fd);
}

TEST_F(TransportTest, ChunkedInAnyCaseIsRead) {
  Start();
  EXPECT_TRUE(Contains(SendAndReadAll(port(), "POST /now HTTP/1.1\r\nTransfer-Encoding:  Chunked \r\n"
                                               "Connection: close\r\n\r\n2\r\nab\r\n0\r\n\r\n"),
                       "now:ab"));
}

TEST_F(TransportTest, AbsoluteFormTargetIsRoutedByItsPath) {
  Start();
  EXPECT_TRUE(Contains(SendAndReadAll(port(), "POST http://example:80/now?x=1 HTTP/1.1\r\nContent-Length: 1\r\n"
                                               "Connection: close\r\n\r\nz"),
                       "now:z"));
}

TEST_F(TransportTest, StopAbandonsOpenStreamsAndReturns) {
  Start();
  const int fd = Connect(port());
  Send(fd, kGetStream);
  auto feed = WaitFeed();
  feed->Add("first\n", false);
  Wake();
  ReadUntil(fd, [](const std::string& d) { return Contains(d, "first"); });
  transport_->Stop();
  runner_.join();
  EXPECT_EQ(feed->abandoned.load(), 1);
  EXPECT_TRUE(ClosedWithin(fd, 1000ms));
  ::close(fd);
}

// The body of a chunked response (everything after the head, chunk framing removed).
std::string Dechunk(const std::string& got) {
  std::string body;
  size_t at = got.find("\r\n\r\n");
  if (at == std::string::npos) return body;
  at += 4;
  while (at < got.size()) {
    const size_t eol = got.find("\r\n", at);
    if (eol == std::string::npos) break;
    const size_t n = std::stoul(got.substr(at, eol - at), nullptr, 16);
    if (n == 0) break;
    body += got.substr(eol + 2, n);
    at = eol + 2 + n + 2;
  }
  return body;
}

TEST_F(TransportTest, AStreamChunkLargerThanTheBufferLimitIsWrittenWhole) {
  // The limit is on output waiting behind a write (a client slower than its tokens), not on
  // one chunk handed to the socket whole: a 1 MiB chunk under a 64 KiB limit arrives.
  TransportOptions o;
  o.max_buffered_bytes = 64 << 10;
  Start(o);
  const int fd = Connect(port());
  Send(fd, kGetStream);
  auto feed = WaitFeed();
  // The head is written first, alone (so no write is in flight when the chunk comes).
  std::string got = ReadUntil(fd, [](const std::string& d) { return Contains(d, "\r\n\r\n"); });
  std::this_thread::sleep_for(50ms);
  const std::string big(1 << 20, 'x');
  feed->Add(big, false);  // not the last: the stream goes on after it
  Wake();
  got += ReadUntil(fd, [&](const std::string& d) { return got.size() + d.size() > big.size(); });
  feed->Add("end", true);
  Wake();
  got += ReadUntil(fd, [](const std::string& d) { return Contains(d, "\r\n0\r\n\r\n"); });
  EXPECT_EQ(Dechunk(got), big + "end") << got.substr(0, 200);
  EXPECT_EQ(feed->abandoned.load(), 0);
  ::close(fd);
}

TEST_F(TransportTest, AStreamClientThatStopsReadingIsDroppedAndItsWorkAbandoned) {
  TransportOptions o;
  o.max_buffered_bytes = 64 << 10;
  o.write_timeout_s = 0.5;
  Start(o);
  const int fd = Connect(port());
  Send(fd, kGetStream);
  auto feed = WaitFeed();
  // Tokens keep coming; the client reads none of them. The socket buffers fill, 64 KiB wait
  // behind the write and the stream is pulled no more; the write makes no progress for 0.5 s:
  // dropped, abandoned.
  const std::string piece(16 << 10, 'y');
  for (int i = 0; i < 4000 && feed->abandoned.load() == 0; ++i) {
    feed->Add(piece, false);
    Wake();
    std::this_thread::sleep_for(2ms);
  }
  EXPECT_EQ(feed->abandoned.load(), 1);
  for (int i = 0; i < 300 && transport_->num_connections() > 0; ++i) std::this_thread::sleep_for(10ms);
  EXPECT_EQ(transport_->num_connections(), 0);
  ::close(fd);
}

// One Pull took whatever the source held, and the connection was closed when that, behind a
// write, passed max_buffered_bytes: a client that read everything, only later than the source
// filled, lost its stream mid-chunk. The stream is pulled a bounded piece at a time, and not at
// all while max_buffered_bytes wait (backpressure): a client that pauses, then reads, gets all of
// it, and meanwhile the rest waits in the source.
TEST_F(TransportTest, AStreamIsPulledNoFasterThanItsClientReads) {
  TransportOptions o;
  o.max_buffered_bytes = 64 << 10;
  Start(o);
  const int fd = Connect(port());
  const int small = 16 << 10;
  ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
  Send(fd, kGetStream);
  auto feed = WaitFeed();
  // The most the kernel buffers for the server's side (its send buffer grows up to tcp_wmem's
  // third field); the client's receive buffer is 32 KiB at most.
  size_t kernel = 4u << 20;
  if (FILE* f = std::fopen("/proc/sys/net/ipv4/tcp_wmem", "r")) {
    size_t lo = 0, mid = 0, hi = 0;
    if (std::fscanf(f, "%zu %zu %zu", &lo, &mid, &hi) == 3) kernel = hi;
    std::fclose(f);
  }
  // That and 16 MiB more, in 16 KiB events, a wake each 1 MiB, while the client reads nothing.
  const int pieces = static_cast<int>((kernel + (16u << 20)) >> 14);
  std::string want;
  for (int i = 0; i < pieces; ++i) {
    const std::string piece(16 << 10, static_cast<char>('a' + i % 26));
    want += piece;
    feed->Add(piece, i == pieces - 1);
    if (i % 64 == 63 || i == pieces - 1) Wake();
  }
  size_t last = SIZE_MAX;
  for (int i = 0; i < 250; ++i) {  // until the pulls stop (5 s at most)
    std::this_thread::sleep_for(20ms);
    std::lock_guard<std::mutex> lock(feed->mu);
    if (feed->pulled_bytes == last) break;
    last = feed->pulled_bytes;
  }
  {
    // The kernel's buffers and max_buffered_bytes hold what was pulled (with a write's and a
    // Pull's worth, a few hundred KiB), not everything; one Pull gave its bound and one event at
    // most.
    std::lock_guard<std::mutex> lock(feed->mu);
    EXPECT_LT(feed->pulled_bytes, kernel + (1u << 20));
    EXPECT_LE(feed->max_pulled, (64u << 10) + (16u << 10));
  }
  EXPECT_EQ(feed->abandoned.load(), 0);
  const std::string end = "\r\n0\r\n\r\n";
  const std::string got = ReadUntil(
      fd,
      [&](const std::string& d) {
        return d.size() >= end.size() && d.compare(d.size() - end.size(), end.size(), end) == 0;
      },
      60000ms);
  const std::string body = Dechunk(got);
  EXPECT_EQ(body.size(), want.size());
  EXPECT_TRUE(body == want);
  EXPECT_EQ(feed->abandoned.load(), 0);
  ::close(fd);
}

// Backpressure leaves what the client has not taken in the source, which bounds it: a client that
// reads too slowly for that bound (StreamSource::Overrun) is dropped, long before the write
// timeout, and its work abandoned.
TEST_F(TransportTest, AStreamClientTooFarBehindForTheSourcesBoundIsDropped) {
  TransportOptions o;
  o.max_buffered_bytes = 64 << 10;
  o.write_timeout_s = 60;
  Start(o);
  const int fd = Connect(port());
  Send(fd, kGetStream);
  auto feed = WaitFeed();
  feed->overrun = true;  // asked only while the client is not taking the queue
  const std::string piece(16 << 10, 'y');
  for (int i = 0; i < 4000 && feed->abandoned.load() == 0; ++i) {
    feed->Add(piece, false);
    Wake();
    std::this_thread::sleep_for(2ms);
  }
  EXPECT_EQ(feed->abandoned.load(), 1);
  EXPECT_TRUE(ClosedWithin(fd, 5000ms));
  ::close(fd);
}

TEST_F(TransportTest, ASlowReaderMakingProgressIsNotCutOff) {
  // The write timeout is for a write that makes no progress: a 12 MiB body read 256 KiB at a
  // time with 50 ms pauses takes well over the 1 s timeout, and arrives whole.
  TransportOptions o;
  o.write_timeout_s = 1.0;
  Start(o);
  const int fd = Connect(port());
  const int small = 16 << 10;
  ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
  Send(fd, kGetDeferred);
  auto feed = WaitFeed();
  const std::string body(12 << 20, 'z');
  feed->Add(body, true);
  Wake();
  std::string got;
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  auto body_read = [&] {  // the head, then all of the body
    const size_t head = got.find("\r\n\r\n");
    return head != std::string::npos && got.size() - head - 4 >= body.size();
  };
  while (!body_read() && std::chrono::steady_clock::now() < deadline) {
    size_t burst = 0;
    while (burst < (256u << 10)) {
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, 20) <= 0) break;
      char buf[65536];
      const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
      if (n <= 0) goto done;
      got.append(buf, static_cast<size_t>(n));
      burst += static_cast<size_t>(n);
    }
    std::this_thread::sleep_for(50ms);
  }
done:
  const size_t head = got.find("\r\n\r\n");
  ASSERT_NE(head, std::string::npos);
  EXPECT_EQ(got.size() - head - 4, body.size());
  EXPECT_EQ(feed->abandoned.load(), 0);
  ::close(fd);
}

TEST_F(TransportTest, BodiesBeingReceivedShareOneBudget) {
  // Bodies of up to 1 MiB, 1.5 MiB of them in progress at once: a client that sends most of a
  // body and stalls holds its share; the next large body is answered 503 (Retry-After) and its
  // connection closed; small requests still pass; once the stalled client goes, large bodies
  // pass again.
  TransportOptions o;
  o.max_body_bytes = 1 << 20;
  o.max_pending_body_bytes = 3 << 19;
  Start(o);
  const std::string head = "POST /now HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\n";
  const int stalled = Connect(port());
  Send(stalled, head + std::string(900000, 'a'));  // 100,000 bytes short: waits for them
  // Read by the server (its share held) before the next body starts: polled, not slept on.
  for (int i = 0; i < 3000 && transport_->pending_body_bytes() < 900000; ++i) {
    std::this_thread::sleep_for(10ms);
  }
  ASSERT_GE(transport_->pending_body_bytes(), 900000u);
  const int next = Connect(port());
  Send(next, head);
  // The 503 comes once this body's growth passes what the stalled one left of the budget.
  ::send(next, std::string(900000, 'b').data(), 900000, MSG_NOSIGNAL);
  std::string got = ReadAll(next);
  EXPECT_TRUE(got.rfind("HTTP/1.1 503", 0) == 0) << got.substr(0, 300);
  EXPECT_TRUE(Contains(got, "Retry-After: 1")) << got.substr(0, 300);
  EXPECT_TRUE(Contains(got, "request bodies")) << got.substr(0, 300);
  ::close(next);
  EXPECT_EQ(SendAndReadAll(port(), "POST /now HTTP/1.1\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
                .substr(0, 12), "HTTP/1.1 200");
  ::close(stalled);
  // Its parser, and its share, go with its connection.
  for (int i = 0; i < 3000 && transport_->pending_body_bytes() > 0; ++i)
    std::this_thread::sleep_for(10ms);
  ASSERT_EQ(transport_->pending_body_bytes(), 0u);
  got = SendAndReadAll(port(), "POST /now HTTP/1.1\r\nContent-Length: 1000000\r\nConnection: close\r\n\r\n" +
                                   std::string(1000000, 'c'));
  EXPECT_TRUE(got.rfind("HTTP/1.1 200", 0) == 0) << got.substr(0, 300);
  EXPECT_EQ(got.size() - got.find("\r\n\r\n") - 4, 4 + 1000000u);  // "now:" + the body
}

TEST_F(TransportTest, ABodyWithItsHandlerKeepsItsShareOfTheBudget) {
  // A budget that holds one 1 MB body: a body read whole and handed to a handler thread (held
  // there, as one waiting in the pool's queue is held by its closure) keeps its share, so the
  // next large body is answered 503; once its handler is done with it, large bodies pass again.
  // (The share was given back as soon as the body was parsed, and queued bodies were unbounded.)
  TransportOptions o;
  o.max_body_bytes = 1 << 20;
  o.max_pending_body_bytes = 3 << 19;
  Start(o);
  const std::string body(1000000, 'a');
  const std::string head = "Host: x\r\nContent-Length: 1000000\r\n";
  const int first = Connect(port());
  Send(first, "POST /queued HTTP/1.1\r\n" + head + "\r\n" + body);
  for (int i = 0; i < 1000 && handlers_holding_.load() == 0; ++i) std::this_thread::sleep_for(10ms);
  ASSERT_EQ(handlers_holding_.load(), 1);
  std::string got = SendAndReadAll(port(), "POST /now HTTP/1.1\r\n" + head + "\r\n" + body);
  EXPECT_TRUE(got.rfind("HTTP/1.1 503", 0) == 0) << got.substr(0, 300);
  EXPECT_TRUE(Contains(got, "request bodies")) << got.substr(0, 300);
  OpenGate();
  got = ReadUntil(first, [](const std::string& d) { return Contains(d, "handled"); });
  EXPECT_TRUE(got.rfind("HTTP/1.1 200", 0) == 0) << got.substr(0, 300);
  // Its handler ended before it answered: the share is back.
  got = SendAndReadAll(port(), "POST /now HTTP/1.1\r\n" + head + "Connection: close\r\n\r\n" + body);
  EXPECT_TRUE(got.rfind("HTTP/1.1 200", 0) == 0) << got.substr(0, 300);
  ::close(first);
}

TEST_F(TransportTest, AHandlerWhoseClientLeftIsStillCountedAsATask) {
  // SIGTERM's drain waited on num_unanswered only: a handler still working for a client that
  // had left (an adapter load) was not counted there, and Stop joined it past the deadline.
  Start();
  EXPECT_EQ(transport_->num_handler_tasks(), 0);
  const int fd = Connect(port());
  Send(fd, "POST /queued HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n");
  for (int i = 0; i < 1000 && handlers_holding_.load() == 0; ++i) std::this_thread::sleep_for(10ms);
  ASSERT_EQ(handlers_holding_.load(), 1);
  EXPECT_EQ(transport_->num_unanswered(), 1);
  ::close(fd);
  for (int i = 0; i < 1000 && transport_->num_unanswered() > 0; ++i) std::this_thread::sleep_for(10ms);
  EXPECT_EQ(transport_->num_unanswered(), 0);  // the client left
  EXPECT_EQ(transport_->num_handler_tasks(), 1);  // its handler still runs
  OpenGate();
  for (int i = 0; i < 1000 && transport_->num_handler_tasks() > 0; ++i) std::this_thread::sleep_for(10ms);
  EXPECT_EQ(transport_->num_handler_tasks(), 0);
}

TEST_F(TransportTest, ConnectionsBeyondTheLimitGet503) {
  TransportOptions o;
  o.max_connections = 2;
  Start(o);
  const int a = Connect(port()), b = Connect(port());
  // Both counted before the third arrives, however long the server takes to accept them.
  for (int i = 0; i < 3000 && transport_->num_connections() < 2; ++i) {
    std::this_thread::sleep_for(10ms);
  }
  ASSERT_EQ(transport_->num_connections(), 2);
  const int c = Connect(port());
  const std::string got = ReadAll(c);
  EXPECT_TRUE(got.rfind("HTTP/1.1 503", 0) == 0) << got;
  // An OpenAI error object, its length as declared.
  const size_t head = got.find("\r\n\r\n");
  ASSERT_NE(head, std::string::npos);
  const std::string body = got.substr(head + 4);
  EXPECT_TRUE(Contains(got, "Content-Length: " + std::to_string(body.size()) + "\r\n")) << got;
  EXPECT_TRUE(Contains(body, "\"type\":\"ServiceUnavailableError\"") && Contains(body, "\"code\":503")) << body;
  ::close(a);
  ::close(b);
  ::close(c);
}

}  // namespace
}  // namespace loom::server
