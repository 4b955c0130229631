// A request body for Beast's parser that grows with the bytes received instead of reserving the
// declared Content-Length up front.
#pragma once

#include <algorithm>
#include <atomic>
#include <boost/asio/error.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/optional.hpp>
#include <cstdint>
#include <memory>
#include <new>
#include <string>
#include <utility>

namespace loom::server {

// The bytes every request body in memory holds together (capacity, as reserved) — being
// received, or read and waiting for or in its handler — against one limit: 4,096 connections
// each sending 8 MiB and stalling would otherwise pin 32 GiB. Reserve fails past the limit; the
// reading connection answers 503. Reserve on the transport's I/O thread only; Release from any
// thread (a handled request's body is given back where its handler ends), so a Reserve may see
// a Release late: a refusal then, never an overrun.
//
// The last `small_reserve` bytes are for small bodies (whose capacity stays within kSmallBody):
// first come, first served alone let ~64 connections each send half of an 8 MiB body and stall,
// and every request with a body, 100 bytes included, was refused until they timed out.
class BodyBudget {
 public:
  static constexpr size_t kSmallBody = size_t{64} << 10;
  explicit BodyBudget(size_t limit, size_t small_reserve = 0)
      : limit_(limit), small_reserve_(std::min(small_reserve, limit)) {}
  // `n` more bytes for a body whose capacity becomes `capacity` with them (or that declared a
  // larger length: it is not small).
  bool Reserve(size_t n, size_t capacity = 0) {
    const size_t cap = capacity <= kSmallBody ? limit_ : limit_ - small_reserve_;
    if (n > cap - std::min(cap, used_.load(std::memory_order_relaxed))) return false;
    used_.fetch_add(n, std::memory_order_relaxed);
    return true;
  }
  void Release(size_t n) { used_.fetch_sub(n, std::memory_order_relaxed); }
  size_t used() const { return used_.load(std::memory_order_relaxed); }
  size_t limit() const { return limit_; }

 private:
  const size_t limit_;
  const size_t small_reserve_;  // of limit_: only for bodies of at most kSmallBody
  std::atomic<size_t> used_{0};
};

// A request body's text, with the budget (if any) its reader reserves from; the transport sets
// `budget` on a parser's body before reading it. Otherwise a std::string.
struct BudgetedString : std::string {
  BodyBudget* budget = nullptr;
  size_t reserved = 0;  // from `budget`: the capacity the reader gave this body, not yet released
  bool discard = false;  // read and dropped: nothing kept, nothing reserved (a screened request's)
  size_t dropped = 0;    // with discard: the bytes dropped
  std::atomic<uint64_t>* dropped_total = nullptr;  // with discard: counts them too, if set
};

// Moves `body`'s reservation into a holder that releases it when its last copy goes (the
// request's body_hold): the parser, and with it the reader that would release it, goes as soon
// as the request is read. Null when nothing is reserved.
inline std::shared_ptr<const void> TakeReservation(BudgetedString& body) {
  if (body.budget == nullptr || body.reserved == 0) return nullptr;
  struct Hold {
    Hold(BodyBudget* b, size_t n) : budget(b), bytes(n) {}
    Hold(const Hold&) = delete;
    Hold& operator=(const Hold&) = delete;
    ~Hold() { budget->Release(bytes); }
    BodyBudget* budget;
    size_t bytes;
  };
  auto hold = std::make_shared<const Hold>(body.budget, body.reserved);
  body.reserved = 0;  // after make_shared: a bad_alloc leaves the reader to release it
  return hold;
}

// Beast's string_body reserves a request's whole Content-Length before any of it arrives: with
// a large --max-body, one request declaring 500 GB (and sending a few bytes) threw bad_alloc out
// of the I/O thread and ended the server; with the default limit each of a thousand idle
// connections still pinned 8 MiB. Here memory follows what was actually received (the parser
// still refuses a declared or chunked body above its body_limit), and a failed allocation is the
// request's error (answered 413), not an exception. Reading only: responses are written by hand.
// With a budget set on the body, every growth of its capacity is reserved from it first (and
// released when the reader goes, with the parser, unless TakeReservation took it); past the
// budget the read fails with boost::asio::error::no_buffer_space.
struct GrowingStringBody : boost::beast::http::string_body {
  using value_type = BudgetedString;

  class reader {
   public:
    template <bool isRequest, class Fields>
    reader(boost::beast::http::header<isRequest, Fields>&, value_type& body) : body_(body) {}
    ~reader() {
      if (body_.budget != nullptr) body_.budget->Release(std::exchange(body_.reserved, 0));
    }
    reader(const reader&) = delete;
    reader& operator=(const reader&) = delete;

    void init(const boost::optional<std::uint64_t>& length, boost::beast::error_code& ec) {
      body_.clear();
      declared_ = length ? *length : 0;
      ec = {};
    }

    template <class ConstBufferSequence>
    std::size_t put(const ConstBufferSequence& buffers, boost::beast::error_code& ec) {
      std::size_t n = 0;
      if (body_.discard) {
        const std::size_t dropped = boost::beast::buffer_bytes(buffers);
        body_.dropped += dropped;
        if (body_.dropped_total != nullptr) body_.dropped_total->fetch_add(dropped);
        ec = {};
        return dropped;
      }
      try {
        // Doubling, but never past a declared Content-Length (string's own doubling left a
        // body's capacity at up to twice its size).
        const std::size_t want = body_.size() + boost::beast::buffer_bytes(buffers);
        if (want > body_.capacity()) {
          std::size_t cap = std::max(want, 2 * body_.capacity());
          if (declared_ >= want && cap > declared_) cap = static_cast<std::size_t>(declared_);
          if (body_.budget != nullptr) {
            // A body is small (may use the reserve) by its declared length, not by how much of
            // it came yet: an 8 MiB body grew through the small sizes first.
            const std::size_t size = std::max<std::size_t>(
                cap, static_cast<std::size_t>(std::min<std::uint64_t>(declared_, SIZE_MAX)));
            if (!body_.budget->Reserve(cap - body_.reserved, size)) {
              ec = boost::asio::error::no_buffer_space;
              return 0;
            }
            body_.reserved = cap;
          }
          // Into a fresh string: libstdc++'s reserve itself grows to at least twice the old
          // capacity, past the declared length.
          std::string grown;
          grown.reserve(cap);
          grown.append(body_);
          body_.swap(grown);
        }
        for (const auto b : boost::beast::buffers_range_ref(buffers)) {
          body_.append(static_cast<const char*>(b.data()), b.size());
          n += b.size();
        }
      } catch (const std::exception&) {  // bad_alloc, length_error
        ec = boost::beast::http::error::body_limit;
        return n;
      }
      ec = {};
      return n;
    }

    void finish(boost::beast::error_code& ec) { ec = {}; }

   private:
    value_type& body_;
    std::uint64_t declared_ = 0;  // Content-Length, or 0 (chunked)
  };
};

}  // namespace loom::server
