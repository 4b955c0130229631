// GrowingStringBody: a request body that holds what arrived, not what Content-Length declared.
#include "server/http_body.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <memory>
#include <string>

namespace loom::server {
namespace {

namespace beast = boost::beast;
namespace http = beast::http;

// Feeds `bytes` to a request parser; returns what it consumed, *ec its error.
template <class Parser>
size_t Feed(Parser* p, const std::string& bytes, beast::error_code* ec) {
  return p->put(boost::asio::buffer(bytes.data(), bytes.size()), *ec);
}

TEST(GrowingStringBody, ADeclaredLengthReservesNothing) {
  // A request that declares 3 GiB and sends 5 bytes: string_body reserved the 3 GiB at once
  // (a declaration past RAM threw bad_alloc out of the I/O thread); this body holds 5 bytes.
  const uint64_t declared = uint64_t{3} << 30;
  http::request_parser<GrowingStringBody> p;
  p.body_limit(uint64_t{4} << 30);
  beast::error_code ec;
  const std::string head =
      "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: " + std::to_string(declared) +
      "\r\n\r\n";
  const size_t used = Feed(&p, head + "hello", &ec);
  ASSERT_FALSE(ec) << ec.message();
  Feed(&p, head.substr(used) + "hello", &ec);  // the parser takes the body in a second put
  ASSERT_TRUE(!ec || ec == http::error::need_more) << ec.message();
  EXPECT_EQ(p.get().body(), "hello");
  EXPECT_LT(p.get().body().capacity(), size_t{1} << 20);
  EXPECT_FALSE(p.is_done());
}

// Feeds `msg` in pieces of `piece` bytes, as a socket delivers it (a parser takes only what it
// can use from each: the rest is offered again with the next piece); true when the message is
// done.
template <class Parser>
bool FeedInPieces(Parser* p, const std::string& msg, size_t piece) {
  std::string pending;
  size_t at = 0;
  beast::error_code ec;
  while (!p->is_done()) {
    if (at < msg.size()) {
      pending += msg.substr(at, piece);
      at += piece;
    }
    const size_t used = Feed(p, pending, &ec);
    if (ec && ec != http::error::need_more) return false;
    pending.erase(0, used);
    if (used == 0 && at >= msg.size()) return p->is_done();
  }
  return true;
}

TEST(GrowingStringBody, ChunkedBodiesAndCapacityAtTheDeclaredLength) {
  const std::string body(50000, 'y');
  {
    http::request_parser<GrowingStringBody> p;
    std::string msg = "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n";
    for (size_t i = 0; i < body.size(); i += 7000) {
      const std::string part = body.substr(i, 7000);
      char size[16];
      std::snprintf(size, sizeof(size), "%zx", part.size());
      msg += std::string(size) + "\r\n" + part + "\r\n";
    }
    msg += "0\r\n\r\n";
    ASSERT_TRUE(FeedInPieces(&p, msg, 1000));
    EXPECT_EQ(p.get().body(), body);
  }
  {
    // Grown in pieces, the body stops at its declared length (string's doubling left up to 2×).
    http::request_parser<GrowingStringBody> p;
    const std::string msg =
        "POST / HTTP/1.1\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
    ASSERT_TRUE(FeedInPieces(&p, msg, 3000));
    EXPECT_EQ(p.get().body(), body);
    EXPECT_EQ(p.get().body().capacity(), body.size());
  }
}

TEST(GrowingStringBody, AWholeBodyAndTheLimitStillHold) {
  const std::string body(100000, 'x');
  {
    http::request_parser<GrowingStringBody> p;
    beast::error_code ec;
    const std::string msg =
        "POST / HTTP/1.1\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
    size_t at = 0;
    while (at < msg.size() && !p.is_done()) {  // in pieces, as a socket delivers it
      const std::string piece = msg.substr(at, 4096);
      const size_t used = Feed(&p, piece, &ec);
      ASSERT_TRUE(!ec || ec == http::error::need_more) << ec.message();
      at += used;
      if (used == 0) break;
    }
    ASSERT_TRUE(p.is_done());
    EXPECT_EQ(p.get().body(), body);
  }
  {
    http::request_parser<GrowingStringBody> p;
    p.body_limit(1000);
    beast::error_code ec;
    Feed(&p, "POST / HTTP/1.1\r\nContent-Length: 1001\r\n\r\n", &ec);
    EXPECT_EQ(ec, http::error::body_limit);
  }
}

TEST(GrowingStringBody, SmallBodiesKeepAReserveLargeOnesCannotTake) {
  // 1 MB of budget, its last 200 KB for bodies of at most 64 KiB: two 400 KB bodies fill the
  // large bodies' share, a third (200 KB, which the whole budget would hold) is refused, and a
  // small one is still taken beside them.
  BodyBudget budget(1000000, 200000);
  std::vector<std::unique_ptr<http::request_parser<GrowingStringBody>>> big;
  auto send = [&](size_t bytes, beast::error_code* ec) {
    big.push_back(std::make_unique<http::request_parser<GrowingStringBody>>());
    big.back()->get().body().budget = &budget;
    big.back()->body_limit(1 << 20);
    const std::string msg = "POST / HTTP/1.1\r\nContent-Length: " + std::to_string(bytes) +
                            "\r\n\r\n" + std::string(bytes, 'x');
    const size_t used = Feed(big.back().get(), msg, ec);
    if (!*ec) Feed(big.back().get(), msg.substr(used), ec);
    if (*ec == http::error::need_more) *ec = {};
  };
  beast::error_code ec;
  send(400000, &ec);
  ASSERT_FALSE(ec) << ec.message();
  send(400000, &ec);
  ASSERT_FALSE(ec) << ec.message();
  send(200000, &ec);
  EXPECT_EQ(ec, boost::asio::error::no_buffer_space);
  EXPECT_LE(budget.used(), 800000u);
  http::request_parser<GrowingStringBody> small;
  small.get().body().budget = &budget;
  ASSERT_TRUE(FeedInPieces(
      &small, "POST / HTTP/1.1\r\nContent-Length: 5000\r\n\r\n" + std::string(5000, 's'), 700));
  EXPECT_EQ(small.get().body().size(), 5000u);
  // A large body is large from its first bytes (it declared its length): the reserve does not
  // take its first 64 KiB (each of ~64 stalled uploads held that much of it).
  http::request_parser<GrowingStringBody> large;
  large.get().body().budget = &budget;
  large.body_limit(1 << 20);
  const std::string start =
      "POST / HTTP/1.1\r\nContent-Length: 200000\r\n\r\n" + std::string(10000, 'l');
  ec = {};
  const size_t used = Feed(&large, start, &ec);
  if (!ec) Feed(&large, start.substr(used), &ec);
  EXPECT_EQ(ec, boost::asio::error::no_buffer_space);
}

TEST(GrowingStringBody, ABudgetBoundsTheBodiesOfAllParsersTogether) {
  // Two bodies with 40,000 of their 60,000 declared bytes received fit a 100,000-byte budget; a
  // third does not (its read fails with no_buffer_space: the transport's 503); a parser that
  // goes returns its share.
  BodyBudget budget(100000);
  const std::string head = "POST / HTTP/1.1\r\nContent-Length: 60000\r\n\r\n";
  auto start = [&](http::request_parser<GrowingStringBody>* p, beast::error_code* ec) {
    p->get().body().budget = &budget;
    const size_t used = Feed(p, head + std::string(40000, 'x'), ec);
    if (!*ec) Feed(p, (head + std::string(40000, 'x')).substr(used), ec);
  };
  beast::error_code ec;
  auto a = std::make_unique<http::request_parser<GrowingStringBody>>();
  start(a.get(), &ec);
  ASSERT_TRUE(!ec || ec == http::error::need_more) << ec.message();
  EXPECT_EQ(a->get().body().size(), 40000u);
  EXPECT_GE(budget.used(), 40000u);
  EXPECT_LE(budget.used(), 60000u);  // never past the declared length
  {
    http::request_parser<GrowingStringBody> b;
    start(&b, &ec);
    ASSERT_TRUE(!ec || ec == http::error::need_more) << ec.message();
    http::request_parser<GrowingStringBody> c;
    start(&c, &ec);
    EXPECT_EQ(ec, boost::asio::error::no_buffer_space);
    EXPECT_LE(budget.used(), budget.limit());
  }
  EXPECT_LE(budget.used(), 60000u);  // b and c returned theirs
  a.reset();
  EXPECT_EQ(budget.used(), 0u);
  // The message, taken out of a finished parser, is a plain string body.
  http::request_parser<GrowingStringBody> d;
  d.get().body().budget = &budget;
  ASSERT_TRUE(FeedInPieces(&d, "POST / HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello", 3));
  std::string taken = std::move(d.release().body());
  EXPECT_EQ(taken, "hello");
}

}  // namespace
}  // namespace loom::server
