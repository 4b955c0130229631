// HTTP transport: streamed replies — chunking, large chunks off the I/O thread, backpressure, slow
// and stalled readers.
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

#include "server/http_transport.h"
#include "unit/http_transport_fixture.h"

namespace loom::server {
namespace {

using namespace std::chrono_literals;

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
  const std::string got =
      ReadUntil(fd, [](const std::string& d) { return Contains(d, "\r\n0\r\n\r\n"); });
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
  ASSERT_TRUE(
      Contains(ReadUntil(fd, [](const std::string& d) { return Contains(d, "a\n"); }), "a\n"));
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
  ASSERT_GE(feed->pulled_on.size(), 3u);          // the I/O thread pulled first (the head, "a")
  EXPECT_NE(feed->large_on, feed->pulled_on[0]);  // the large one: a worker
  EXPECT_EQ(feed->pulled_on.back(), feed->pulled_on[0]);  // then the I/O thread again
  ::close(fd);
}

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
  FeedUntilAbandoned(*feed);
  EXPECT_EQ(feed->abandoned.load(), 1);
  for (int i = 0; i < 300 && transport_->num_connections() > 0; ++i)
    std::this_thread::sleep_for(10ms);
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
  // Until the pulls stop: 5 samples 40 ms apart unchanged (one could be an I/O thread not
  // scheduled on a busy machine), 10 s at most.
  size_t last = SIZE_MAX;
  for (int i = 0, stable = 0; i < 250 && stable < 5; ++i) {
    std::this_thread::sleep_for(40ms);
    std::lock_guard<std::mutex> lock(feed->mu);
    stable = feed->pulled_bytes == last ? stable + 1 : 0;
    last = feed->pulled_bytes;
  }
  {
    // The kernel's buffers and max_buffered_bytes hold what was pulled (with a write's and a
    // Pull's worth, a few hundred KiB), not everything; one Pull gave its bound and one event at
    // most.
    std::lock_guard<std::mutex> lock(feed->mu);
    EXPECT_GT(feed->pulled_bytes, size_t{1} << 20);  // it was streaming
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
  FeedUntilAbandoned(*feed);
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

}  // namespace
}  // namespace loom::server
