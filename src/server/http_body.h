// A request body for Beast's parser that grows with the bytes received instead of reserving the
// declared Content-Length up front.
#pragma once

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

    void init(const boost::optional<std::uint64_t>&, boost::beast::error_code& ec) {
      body_.clear();
      ec = {};
    }

    template <class ConstBufferSequence>
    std::size_t put(const ConstBufferSequence& buffers, boost::beast::error_code& ec) {
      std::size_t n = 0;
      try {
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
  };
};

}  // namespace loom::server
