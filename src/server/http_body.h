// A request body for Beast's parser that grows with the bytes received instead of reserving the
// declared Content-Length up front.
#pragma once

#include <algorithm>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/optional.hpp>
#include <cstdint>
#include <new>
#include <string>

namespace loom::server {

// Beast's string_body reserves a request's whole Content-Length before any of it arrives: with
// a large --max-body, one request declaring 500 GB (and sending a few bytes) threw bad_alloc out
// of the I/O thread and ended the server; with the default limit each of a thousand idle
// connections still pinned 8 MiB. Here memory follows what was actually received (the parser
// still refuses a declared or chunked body above its body_limit), and a failed allocation is the
// request's error (answered 413), not an exception. Reading only: responses are written by hand.
struct GrowingStringBody : boost::beast::http::string_body {
  class reader {
   public:
    template <bool isRequest, class Fields>
    reader(boost::beast::http::header<isRequest, Fields>&, value_type& body) : body_(body) {}

    void init(const boost::optional<std::uint64_t>& length, boost::beast::error_code& ec) {
      body_.clear();
      declared_ = length ? *length : 0;
      ec = {};
    }

    template <class ConstBufferSequence>
    std::size_t put(const ConstBufferSequence& buffers, boost::beast::error_code& ec) {
      std::size_t n = 0;
      try {
        // Doubling, but never past a declared Content-Length (string's own doubling left a
        // body's capacity at up to twice its size).
        const std::size_t want = body_.size() + boost::beast::buffer_bytes(buffers);
        if (want > body_.capacity()) {
          std::size_t cap = std::max(want, 2 * body_.capacity());
          if (declared_ >= want && cap > declared_) cap = static_cast<std::size_t>(declared_);
          // Into a fresh string: libstdc++'s reserve itself grows to at least twice the old
          // capacity, past the declared length.
          value_type grown;
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
