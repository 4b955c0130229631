// One HTTP/1.1 connection on Boost.Beast: bounded parsing, deadlines, deferred replies, SSE
// streams, disconnect detection; every step on the I/O thread, handlers on the worker pool.
#include "server/http_transport_impl.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <deque>
#include <unordered_map>
#include <utility>

#include "server/api_error.h"
#include "server/http_body.h"

namespace loom::server {

namespace beast = boost::beast;
namespace http = beast::http;

namespace {

std::chrono::milliseconds Millis(double seconds) {
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
}

HttpResponse ErrorResponse(int status, const std::string& message, const char* type = "") {
  return ErrorReply(ApiError{status, message, "", type});
}

}  // namespace

class RequestExchange;

// One connection. All state is touched on the I/O thread; the Exchange methods post there.
class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket socket, HttpTransport::Impl* owner)
      : socket_(std::move(socket)), timer_(owner->ioc), state_timer_(owner->ioc), owner_(owner) {}

  // The session keeps itself alive until Close (a reply waiting on the engine has no pending
  // operation holding it; the engine's wake holds only a weak reference). A failure before the
  // first read is armed (an allocation) closes it: nothing would ever call Close, and the
  // session kept itself, its descriptor and its connection slot forever.
  void Start() {
    self_ = shared_from_this();
    Safely([this] { ReadRequest(); });
  }

  // From any thread, for request number `id` (an answer for an earlier request on this
  // connection is dropped, its work abandoned).
  void PostReply(uint64_t id, HttpResponse response) {
    asio::post(owner_->ioc, [self = shared_from_this(), id, r = std::move(response)]() mutable {
      self->Safely([&] { self->OnReply(id, std::move(r)); });
    });
  }
  void PostDefer(uint64_t id, std::shared_ptr<DeferredReply> reply) {
    asio::post(owner_->ioc, [self = shared_from_this(), id, reply = std::move(reply)]() mutable {
      self->Safely([&] { self->OnDefer(id, std::move(reply)); });
    });
  }
  void PostStream(uint64_t id, HttpResponse head, std::shared_ptr<StreamSource> source) {
    asio::post(owner_->ioc, [self = shared_from_this(), id, h = std::move(head),
                             s = std::move(source)]() mutable {
      self->Safely([&] { self->OnStream(id, std::move(h), std::move(s)); });
    });
  }
  void PostWake() {
    if (wake_posted_.exchange(true)) return;  // one pending wake is enough
    asio::post(owner_->ioc, [self = shared_from_this()] { self->Safely([&] { self->OnWake(); }); });
  }

  // Runs one completion's work for this connection. An exception (an allocation that failed)
  // closes the connection, which releases its slot, its watch and any work it started, instead
  // of leaving the I/O loop with the session half-done and held open by itself.
  template <class F>
  void Safely(F&& work) {
    try {
      work();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "loom: HTTP connection closed after an error: %s\n", e.what());
      Close();
    } catch (...) {
      std::fprintf(stderr, "loom: HTTP connection closed after an error\n");
      Close();
    }
  }

  // Whether Close has run (any thread): the client left, or its answer is done.
  bool closed() const { return closed_flag_.load(); }

  // Closes the connection; a pending reply or stream is abandoned (its work cancelled).
  void Close() {
    if (phase_ == Phase::kClosed) return;
    phase_ = Phase::kClosed;
    closed_flag_.store(true);
    error_code ignored;
    socket_.shutdown(tcp::socket::shutdown_both, ignored);
    socket_.close(ignored);
    timer_.cancel();
    state_timer_.cancel();
    if (deferred_) std::exchange(deferred_, nullptr)->Abandon();
    if (stream_) std::exchange(stream_, nullptr)->Abandon();
    if (owner_->sessions.erase(this) > 0) owner_->num_connections.fetch_sub(1);
    SetUnanswered(false);
    current_.reset();
    // Released later, not inside a member function of this session.
    asio::post(owner_->ioc, [keep = std::move(self_)] {});
  }

 private:
  enum class Phase { kReading, kHandling, kReplying, kLingering, kClosed };

  // ---- reading a request ----
  void ReadRequest() {
    phase_ = Phase::kReading;
    // What the previous request set: a refusal before this one's header is read (431, a bad
    // request line) must not be answered as a HEAD's bodiless reply or as HTTP/1.0.
    keep_alive_ = false;
    http10_ = false;
    head_ = false;
    header_.clear();
    screened_.reset();
    parser_.emplace();
    parser_->header_limit(static_cast<uint32_t>(owner_->options.max_header_bytes));
    parser_->body_limit(owner_->options.max_body_bytes);
    parser_->get().body().budget = &owner_->body_budget;
    // One deadline for the whole request, headers and body: a client that trickles bytes
    // cannot hold the connection past it (the wait for a kept-alive client's next request
    // counts too).
    Arm(owner_->options.request_timeout_s);
    AwaitRequestLine(0);
  }

  // RFC 9112 §2.2: empty lines before a request line are ignored (as llhttp, uvicorn's parser
  // for vLLM, does; some clients end a body with an extra CRLF), also when they arrive on their
  // own; Beast's parser would call them a malformed request. At most max_header_bytes of them.
  void AwaitRequestLine(size_t skipped) {
    const auto data = buffer_.data();
    const char* p = static_cast<const char*>(data.data());
    size_t k = 0;
    while (k < data.size() && (p[k] == '\r' || p[k] == '\n')) ++k;
    buffer_.consume(k);
    skipped += k;
    if (skipped > owner_->options.max_header_bytes) {
      return Refuse(ErrorResponse(400, "malformed HTTP request (only empty lines)"));
    }
    if (buffer_.size() == 0) {
      // Nothing but (perhaps) empty lines yet: read before the parser sees the first byte.
      socket_.async_read_some(
          buffer_.prepare(4096), [self = shared_from_this(), skipped](error_code ec, size_t got) {
            self->Safely([&] {
              if (self->phase_ != Phase::kReading) return;
              if (ec) return self->Close();  // closed, reset or timed out: nobody to answer
              self->buffer_.commit(got);
              self->AwaitRequestLine(skipped);
            });
          });
      return;
    }
    http::async_read_header(socket_, buffer_, *parser_,
                            [self = shared_from_this()](error_code ec, size_t) {
                              self->Safely([&] { self->OnHeader(ec); });
                            });
  }

  void OnHeader(error_code ec) {
    if (phase_ != Phase::kReading) return;
    if (ec) return OnReadError(ec);
    const auto& req = parser_->get();
    // The header's fields, copied now: a chunked body's trailer fields are added to the same
    // field list when it ends (beside a field of the same name), and are not headers (RFC 9110
    // §6.5.1: a trailing Authorization, Content-Type or Connection was obeyed as one).
    for (const auto& field : req)
      header_.emplace_back(std::string(field.name_string()), std::string(field.value()));
    keep_alive_ = req.keep_alive();
    http10_ = req.version() < 11;
    head_ = req.method() == http::verb::head;
    // Transfer-Encoding: only `chunked`, alone. Another coding last leaves the body's end
    // unknown (Beast read it as empty and its bytes as the next request); one before chunked
    // (gzip, chunked) would hand the handler encoded bytes; with a Content-Length the two
    // framings disagree (RFC 9112 §6.3). Refused in any header order.
    if (const size_t te = req.count(http::field::transfer_encoding); te > 0) {
      if (req.count(http::field::content_length) > 0) {
        return Refuse(ErrorResponse(400, "Transfer-Encoding and Content-Length together"));
      }
      beast::string_view coding = req[http::field::transfer_encoding];
      while (!coding.empty() && (coding.front() == ' ' || coding.front() == '\t')) coding.remove_prefix(1);
      while (!coding.empty() && (coding.back() == ' ' || coding.back() == '\t')) coding.remove_suffix(1);
      if (te != 1 || !beast::iequals(coding, "chunked") || !parser_->chunked()) {
        return Refuse(ErrorResponse(501, "Transfer-Encoding '" + std::string(coding.substr(0, 64)) +
                                             "' is not supported (only chunked)"));
      }
    }
    const bool expects_100 =
        !http10_ && beast::iequals(req[http::field::expect], "100-continue") && !parser_->is_done();
    // The owner's Screening (a missing API key, a route that reads no body): the body is read
    // and dropped (it holds no budget); a refusal is answered after it, the connection kept —
    // or, to a client waiting for 100 Continue, at once and the connection closed (RFC 9110
    // §10.1.1). (A declared length over the limit never gets here: Beast answers 413.)
    if (owner_->screen && !parser_->is_done()) {
      HttpRequest head = Head(req);
      head.headers = header_;
      Screening screening;
      try {
        screening = owner_->screen(head);
      } catch (...) {
        screening.refusal = ErrorResponse(500, "internal error");
      }
      if (screening.refusal && expects_100) return Refuse(std::move(*screening.refusal));
      screened_ = std::move(screening.refusal);
      if (screened_ || screening.drop_body) {
        parser_->get().body().discard = true;
        parser_->get().body().dropped_total = &owner_->dropped_body_bytes;
      }
      if (screened_) return ReadBody();
    }
    // An HTTP/1.0 client's Expect is ignored (RFC 9110 §10.1.1): it does not know 100.
    if (expects_100) {
      static const char kContinue[] = "HTTP/1.1 100 Continue\r\n\r\n";
      asio::async_write(socket_, asio::buffer(kContinue, sizeof(kContinue) - 1),
                        [self = shared_from_this()](error_code e, size_t) {
                          self->Safely([&] {
                            if (e) return self->Close();
                            self->ReadBody();
                          });
                        });
      return;
    }
    ReadBody();
  }

  void ReadBody() {
    if (phase_ != Phase::kReading) return;
    http::async_read(socket_, buffer_, *parser_,
                     [self = shared_from_this()](error_code ec, size_t) {
                       self->Safely([&] { self->OnRequest(ec); });
                     });
  }

  void OnReadError(error_code ec) {
    if (ec == http::error::header_limit) {
      return Refuse(ErrorResponse(431, "request headers exceed " +
                                           std::to_string(owner_->options.max_header_bytes) + " bytes",
                                  "RequestHeaderFieldsTooLarge"));
    }
    if (ec == asio::error::no_buffer_space) {  // GrowingStringBody: the shared BodyBudget is spent
      return Refuse(ErrorResponse(503, "the server is receiving too many large request bodies (" +
                                           std::to_string(owner_->body_budget.limit()) +
                                           " bytes at once); retry later"));
    }
    if (ec == http::error::body_limit) {
      return Refuse(ErrorResponse(413, "the request body is too large (more than " +
                                           std::to_string(owner_->options.max_body_bytes) + " bytes)"));
    }
    // A closed, reset or timed-out connection (also mid-request; socket errors are not in
    // Beast's HTTP category): nobody to answer.
    if (ec == http::error::end_of_stream || ec == http::error::partial_message ||
        ec.category() != error_code(http::error::end_of_stream).category()) {
      return Close();
    }
    Refuse(ErrorResponse(400, "malformed HTTP request (" + ec.message() + ")"));
  }

  // An answer after which the connection cannot be reused: unread request bytes may follow.
  void Refuse(HttpResponse r) {
    r.close = true;
    linger_ = true;
    phase_ = Phase::kHandling;
    SetUnanswered(true);
    answered_ = false;
    OnReply(++request_id_, std::move(r));  // a number of its own: no late answer takes it
  }

  // A request's method, path (without its query) and version.
  template <typename Message>
  static HttpRequest Head(const Message& msg) {
    HttpRequest r;
    r.method = std::string(msg.method_string());
    const beast::string_view target = msg.target();
    beast::string_view path = target.substr(0, target.find('?'));
    // The absolute form (a proxy's "GET http://host/health"): its path.
    if (path.starts_with("http://") || path.starts_with("https://")) {
      const size_t slash = path.find('/', path.find("//") + 2);
      path = slash == beast::string_view::npos ? beast::string_view("/") : path.substr(slash);
    }
    r.path = std::string(path);
    r.version = msg.version();
    return r;
  }

  void OnRequest(error_code ec) {
    if (phase_ != Phase::kReading) return;
    if (ec) return OnReadError(ec);
    Disarm();
    // The body's share of the budget goes with the request, to its handler (the parser's
    // reader gave it back here, and a body queued for a handler thread counted nowhere).
    std::shared_ptr<const void> body_hold = TakeReservation(parser_->get().body());
    const size_t dropped = parser_->get().body().dropped;
    http::request<GrowingStringBody> msg = parser_->release();
    parser_.reset();
    HttpRequest r = Head(msg);
    r.headers = std::move(header_);  // the header's fields, not the trailer's
    r.body = std::move(msg.body());
    r.body_hold = std::move(body_hold);
    r.dropped_body_bytes = dropped;
    linger_ = false;
    answered_ = false;
    phase_ = Phase::kHandling;
    SetUnanswered(true);
    if (screened_) {  // refused from its header; its body was dropped
      HttpResponse refusal = std::move(*screened_);
      screened_.reset();
      return OnReply(++request_id_, std::move(refusal));
    }
    Watch();
    // The request's own Exchange, kept by the session while the request is current (the
    // engine's wake holds it weakly).
    current_ = NewExchange(++request_id_);
    try {
      owner_->route(std::move(r), current_);
    } catch (const std::exception& e) {
      OnReply(request_id_, ErrorResponse(500, std::string("internal error: ") + e.what()));
    } catch (...) {
      OnReply(request_id_, ErrorResponse(500, "internal error"));
    }
  }

  std::shared_ptr<Exchange> NewExchange(uint64_t id);  // after RequestExchange, below

  // ---- noticing a client that leaves while its reply is prepared or streamed ----
  void Watch() {
    if (watching_ || phase_ == Phase::kClosed) return;
    watching_ = true;
    const uint64_t gen = ++watch_gen_;
    socket_.async_wait(tcp::socket::wait_read, [self = shared_from_this(), gen](error_code ec) {
      self->Safely([&] {
        if (gen != self->watch_gen_) return;  // cancelled (the next request is being read)
        self->watching_ = false;
        if (self->phase_ == Phase::kClosed || self->phase_ == Phase::kReading) return;
        if (ec) return self->PeerGone();
        char c;
        const ssize_t n = ::recv(self->socket_.native_handle(), &c, 1, MSG_PEEK | MSG_DONTWAIT);
        if (n == 0) return self->PeerGone();  // EOF: the client closed (or half-closed) its side
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
          return self->Watch();
        if (n < 0) return self->PeerGone();
        // A pipelined request: its bytes go to the buffer the next request is parsed from (so a
        // later close is still seen); once that holds more than a request head, the TCP state
        // is watched instead (WatchState).
        error_code e;
        const size_t avail = self->socket_.available(e);
        if (e || avail == 0) return;
        if (self->buffer_.size() + avail > self->buffer_.max_size()) return self->WatchState();
        const size_t got = self->socket_.read_some(self->buffer_.prepare(avail), e);
        if (e) return self->PeerGone();
        self->buffer_.commit(got);
        self->Watch();
      });
    });
  }

  // The input buffer is full of pipelined requests (TCP holds the rest): the socket stays
  // readable, so a wait cannot tell that the client left. Its TCP state can (the client's FIN
  // makes it CLOSE_WAIT, a reset CLOSE), looked at every 250 ms while the reply is prepared or
  // streamed: a non-stream generation for a client that left ran to max_tokens for nobody.
  void WatchState() {
    watching_ = true;
    const uint64_t gen = ++watch_gen_;
    state_timer_.expires_after(std::chrono::milliseconds(250));
    state_timer_.async_wait([self = shared_from_this(), gen](error_code ec) {
      self->Safely([&] {
        if (ec || gen != self->watch_gen_) return;
        self->watching_ = false;
        if (self->phase_ == Phase::kClosed || self->phase_ == Phase::kReading) return;
        tcp_info info{};
        socklen_t len = sizeof(info);
        if (::getsockopt(self->socket_.native_handle(), IPPROTO_TCP, TCP_INFO, &info, &len) != 0 ||
            info.tcpi_state != TCP_ESTABLISHED) {
          return self->PeerGone();
        }
        self->WatchState();
      });
    });
  }

  void StopWatch() {
    if (!watching_) return;
    watching_ = false;
    ++watch_gen_;
    error_code ignored;
    socket_.cancel(ignored);  // only the watch is pending here (no read, no write)
    state_timer_.cancel();
  }

  void PeerGone() { Close(); }

  // ---- answering ----
  void SetUnanswered(bool on) {
    if (on == unanswered_) return;
    unanswered_ = on;
    owner_->num_unanswered.fetch_add(on ? 1 : -1);
  }

  bool TakeAnswer() {
    if (answered_) return false;  // a handler answered twice: ignore the second
    answered_ = true;
    return true;
  }

  void OnReply(uint64_t id, HttpResponse r) {
    if (id != request_id_ || !TakeAnswer() || phase_ == Phase::kClosed) return;
    Send(std::move(r));
  }

  void Send(HttpResponse r) {
    phase_ = Phase::kReplying;
    close_after_ = r.close || !keep_alive_;
    Queue(ResponseHead(r, "Content-Length: " + std::to_string(r.body.size()) + "\r\n",
                       close_after_, http10_));
    if (!head_) Queue(std::move(r.body));
    complete_ = true;
    Flush();
  }

  // A reply that cannot be delivered (the client left, or a second answer) is abandoned: its
  // work is cancelled.
  void OnDefer(uint64_t id, std::shared_ptr<DeferredReply> reply) {
    if (id != request_id_ || !TakeAnswer() || phase_ == Phase::kClosed) return reply->Abandon();
    deferred_ = std::move(reply);
    PollDeferred();
  }

  void PollDeferred() {
    if (!deferred_->Ready()) return;
    std::shared_ptr<DeferredReply> reply = std::move(deferred_);
    owner_->workers_post([self = shared_from_this(), reply = std::move(reply)] {
      HttpResponse r;
      try {
        r = reply->Build();
      } catch (const std::exception& e) {
        r = ErrorResponse(500, std::string("internal error: ") + e.what());
      }
      asio::post(self->owner_->ioc, [self, r = std::move(r)]() mutable {
        self->Safely([&] {
          if (self->phase_ != Phase::kClosed) self->Send(std::move(r));
        });
      });
    });
  }

  void OnStream(uint64_t id, HttpResponse head, std::shared_ptr<StreamSource> source) {
    if (id != request_id_ || !TakeAnswer() || phase_ == Phase::kClosed) return source->Abandon();
    phase_ = Phase::kReplying;
    // HTTP/1.0 has no chunked encoding: the body ends when the connection closes.
    chunked_ = !http10_;
    close_after_ = !keep_alive_ || !chunked_;
    Queue(ResponseHead(head, chunked_ ? "Transfer-Encoding: chunked\r\n" : "", close_after_,
                       http10_));
    stream_ = std::move(source);
    PumpStream();
  }

  // Pulls the stream's next chunk, unless its client has not taken what is queued. One Pull
  // builds at most PullBytes (plus one event), on this thread or, when the source calls it large
  // (log-prob entries of many tokens, an echo's prompt), on a worker; a Pull that stops at the
  // bound is followed by another (posted: the other connections' work comes between).
  void PumpStream() {
    if (pulling_) return;  // a worker is pulling; it pumps again when it is back
    if (writing_ && queued_bytes_ >= owner_->options.max_buffered_bytes) {
      // Backpressure: nothing more is built while max_buffered_bytes wait behind a write; the
      // write's completion pumps again. What the engine delivers meanwhile waits in the source,
      // which bounds it (a client that takes nothing is dropped by the write timeout first).
      pump_held_ = true;
      if (stream_->Overrun()) Close();
      return;
    }
    const size_t max_bytes = PullBytes();
    if (stream_->NextPullIsLarge()) {
      pulling_ = true;
      owner_->workers_post([self = shared_from_this(), stream = stream_, max_bytes] {
        std::string data;
        bool done = false;
        bool failed = false;
        try {
          done = stream->Pull(&data, max_bytes);
        } catch (...) {  // a failed allocation: this connection closes, the server goes on
          failed = true;
        }
        asio::post(self->owner_->ioc, [self, data = std::move(data), done, failed]() mutable {
          self->Safely([&] {
            self->pulling_ = false;
            if (failed) return self->Close();
            if (self->phase_ == Phase::kClosed || !self->stream_) return;
            self->Pulled(std::move(data), done);
            // What arrived while the worker pulled, or what the bound left.
            if (self->stream_) self->PumpStream();
          });
        });
      });
      return;
    }
    std::string data;
    const bool done = stream_->Pull(&data, max_bytes);
    const bool more = !done && data.size() >= max_bytes;  // it stopped at the bound
    Pulled(std::move(data), done);
    if (more && stream_) PostWake();
  }

  // A Pull's bound: small enough that one Pull's work is short, large enough that a busy stream
  // is a few pulls per engine step.
  size_t PullBytes() const {
    return std::max<size_t>(1, std::min<size_t>(256u << 10, owner_->options.max_buffered_bytes));
  }

  // What a Pull gave: queued as one HTTP chunk and written.
  void Pulled(std::string data, bool done) {
    if (!data.empty()) {
      if (chunked_) {  // the size line and the end as their own buffers: no copy of the data
        char size[24];
        std::snprintf(size, sizeof(size), "%zx\r\n", data.size());
        Queue(size);
        Queue(std::move(data));
        Queue("\r\n");
      } else {
        Queue(std::move(data));
      }
    }
    if (done) {
      stream_.reset();
      if (chunked_) Queue("0\r\n\r\n");
      complete_ = true;
    }
    Flush();
  }

  void OnWake() {
    wake_posted_.store(false);
    if (phase_ == Phase::kClosed) return;
    if (deferred_) return PollDeferred();
    if (stream_) PumpStream();
  }

  void Queue(std::string bytes) {
    queued_bytes_ += bytes.size();
    out_.push_back(std::move(bytes));
  }

  void Flush() {
    if (writing_ || phase_ == Phase::kClosed) return;
    if (out_.empty()) {
      if (complete_) Finish();
      return;
    }
    in_flight_.assign(std::make_move_iterator(out_.begin()), std::make_move_iterator(out_.end()));
    out_.clear();
    in_flight_bytes_ = queued_bytes_;
    queued_bytes_ = 0;
    std::vector<asio::const_buffer> buffers;
    buffers.reserve(in_flight_.size());
    for (const std::string& s : in_flight_) buffers.push_back(asio::buffer(s));
    writing_ = true;
    Arm(owner_->options.write_timeout_s);
    // The timeout is for a write that makes no progress: re-armed each time the socket takes
    // more bytes, so a large body to a slow reader is not cut off after write_timeout_s while a
    // client that stops reading still is.
    auto progress = [self = shared_from_this(), sent = size_t{0}](const error_code& ec, size_t n) mutable {
      if (!ec && n > sent) {
        sent = n;
        try {  // inside asio's write operation: nothing may escape (a failed allocation: the
               // earlier deadline stands)
          self->Arm(self->owner_->options.write_timeout_s);
        } catch (...) {
        }
      }
      return asio::transfer_all()(ec, n);
    };
    asio::async_write(socket_, buffers, std::move(progress), [self = shared_from_this()](error_code ec, size_t) {
      self->Safely([&] {
        self->writing_ = false;
        if (self->phase_ == Phase::kClosed) return;
        self->Disarm();
        self->in_flight_.clear();
        self->in_flight_bytes_ = 0;
        if (ec) return self->PeerGone();
        self->Flush();
        // The client took the queue: the stream held back for it goes on.
        if (std::exchange(self->pump_held_, false) && self->stream_ &&
            self->phase_ != Phase::kClosed) {
          self->PumpStream();
        }
      });
    });
  }

  // The response is written: the next request, or the end of the connection.
  void Finish() {
    complete_ = false;
    SetUnanswered(false);
    current_.reset();  // the request is answered: late wakes and answers for it go nowhere
    if (!close_after_) {
      StopWatch();
      return ReadRequest();
    }
    if (!linger_) return Close();
    // Unread request bytes may be on their way: closing now would reset the connection and
    // could destroy the answer before the client reads it. Half-close, then discard what
    // comes (bounded in time and bytes) until the client closes.
    phase_ = Phase::kLingering;
    StopWatch();
    error_code ignored;
    socket_.shutdown(tcp::socket::shutdown_send, ignored);
    Arm(2.0);
    Discard();
  }

  void Discard() {
    socket_.async_read_some(asio::buffer(owner_->discard),
                            [self = shared_from_this()](error_code ec, size_t n) {
                              self->Safely([&] {
                                if (self->phase_ != Phase::kLingering) return;
                                self->discarded_ += n;
                                if (ec || self->discarded_ > (16u << 20)) return self->Close();
                                self->Discard();
                              });
                            });
  }

  // ---- deadlines ----
  void Arm(double seconds) {
    const uint64_t gen = ++timer_gen_;
    timer_.expires_after(Millis(seconds));
    timer_.async_wait([self = shared_from_this(), gen](error_code ec) {
      if (ec || gen != self->timer_gen_) return;
      self->Close();  // a request that did not arrive in time, or a client that stopped reading
    });
  }
  void Disarm() {
    ++timer_gen_;
    timer_.cancel();
  }

  tcp::socket socket_;
  asio::steady_timer timer_;
  asio::steady_timer state_timer_;  // WatchState's
  HttpTransport::Impl* owner_;
  // Unparsed input: a request head, or a chunk's size line and extensions (bounded: Beast
  // limits neither by itself). Body bytes move into the request as they are parsed.
  beast::flat_buffer buffer_{owner_->options.max_header_bytes + (64u << 10)};
  std::optional<http::request_parser<GrowingStringBody>> parser_;
  Phase phase_ = Phase::kReading;
  bool keep_alive_ = false, http10_ = false, head_ = false;  // of the request being read
  std::vector<std::pair<std::string, std::string>> header_;  // its header's fields, in order
  std::optional<HttpResponse> screened_;  // the owner's refusal of the request being read
  bool answered_ = false;     // the handler has answered this request
  bool close_after_ = false;  // close once the response is written
  bool linger_ = false;       // ... after draining what the client still sends
  bool unanswered_ = false;   // counted in owner_->num_unanswered
  bool complete_ = false;     // the response's last bytes are queued
  bool chunked_ = false;
  std::shared_ptr<DeferredReply> deferred_;
  std::shared_ptr<StreamSource> stream_;
  std::deque<std::string> out_;
  size_t queued_bytes_ = 0;     // in out_
  size_t in_flight_bytes_ = 0;  // in in_flight_ (being written)
  std::vector<std::string> in_flight_;
  bool writing_ = false;
  bool pulling_ = false;    // a worker thread is running stream_->Pull
  bool pump_held_ = false;  // a pump waits for the write to take the queue (backpressure)
  bool watching_ = false;
  uint64_t watch_gen_ = 0, timer_gen_ = 0;
  std::atomic<bool> wake_posted_{false};
  std::atomic<bool> closed_flag_{false};  // phase_ == kClosed, readable from any thread
  std::shared_ptr<Session> self_;  // from Start until Close
  uint64_t request_id_ = 0;        // the current request's number on this connection
  std::shared_ptr<Exchange> current_;
  size_t discarded_ = 0;
};

// What a route answers through: one request of a session.
class RequestExchange : public Exchange {
 public:
  RequestExchange(std::shared_ptr<Session> session, uint64_t id) : session_(std::move(session)), id_(id) {}
  void Reply(HttpResponse r) override { session_->PostReply(id_, std::move(r)); }
  void Defer(std::shared_ptr<DeferredReply> reply) override { session_->PostDefer(id_, std::move(reply)); }
  void Stream(HttpResponse head, std::shared_ptr<StreamSource> source) override {
    session_->PostStream(id_, std::move(head), std::move(source));
  }
  void Wake() override { session_->PostWake(); }
  bool Gone() const override { return session_->closed(); }

 private:
  std::shared_ptr<Session> session_;
  uint64_t id_;
};

std::shared_ptr<Exchange> Session::NewExchange(uint64_t id) {
  return std::make_shared<RequestExchange>(shared_from_this(), id);
}

void StartSession(tcp::socket socket, HttpTransport::Impl* owner) {
  auto session = std::make_shared<Session>(std::move(socket), owner);
  owner->sessions.emplace(session.get(), session);
  owner->num_connections.fetch_add(1);
  session->Start();
}

void CloseSession(Session& session) { session.Close(); }

}  // namespace loom::server
