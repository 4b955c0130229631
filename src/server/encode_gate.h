// EncodeGate: at most one large text is tokenized at a time, and only a few wait for it.
#pragma once

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>

namespace loom::server {

// Tokenizing costs ~1 µs and ~35 bytes per byte of one long word (an 8 MiB run of letters
// takes ~8 s and ~330 MB); a handler thread does it. Without a bound, 16 such prompts sent at
// once would hold every handler thread and both cores for a minute, and several GB, while small
// requests waited for a thread. Texts of at least `large_bytes` go through this gate one at a
// time; at most `max_waiting` wait for it, and a text beyond that is refused (503, retry later),
// so most handler threads stay free for everything else. Smaller texts never wait. Close() (the
// drain deadline) refuses the waiting ones and every later large text, and stops the texts being
// tokenized (BuildPrompts polls closed()). The waiting enter in the
// order they came, and one whose client leaves gives up its place (it would otherwise hold a
// handler thread, and then both cores, for a text nobody reads); one whose client leaves while
// it is tokenized stops there (tokenizer::EncodeCancelScope). Both are counted (abandoned()).
//
// Thread-safety: Enter/Leave from any thread.
class EncodeGate {
 public:
  static constexpr size_t kLargeBytes = 256u << 10;
  static constexpr int kMaxWaiting = 3;

  explicit EncodeGate(size_t large_bytes = kLargeBytes, int max_waiting = kMaxWaiting)
      : large_bytes_(large_bytes), max_waiting_(max_waiting) {}

  // Fewer waiting where there are few handler threads (a quarter of them at most hold the
  // gate), set before the server takes requests.
  void SetHandlerThreads(int threads) {
    std::lock_guard<std::mutex> lock(mu_);
    max_waiting_ = std::max(0, std::min(kMaxWaiting, threads / 4 - 1));
  }

  // Holds the gate while alive when the text is large; ok() is false when it was refused.
  class Pass {
   public:
    Pass(Pass&& o) noexcept : gate_(o.gate_), ok_(o.ok_), closed_(o.closed_), gone_(o.gone_) {
      o.gate_ = nullptr;
    }
    Pass& operator=(Pass&&) = delete;
    ~Pass() {
      if (gate_ != nullptr) gate_->Leave();
    }
    bool ok() const { return ok_; }
    bool closed() const { return closed_; }  // refused because the gate was closed
    bool gone() const { return gone_; }      // given up: the client left while it waited
    bool holds() const { return gate_ != nullptr; }  // holds the gate (a large text)

   private:
    friend class EncodeGate;
    Pass(EncodeGate* gate, bool ok, bool closed = false, bool gone = false)
        : gate_(gate), ok_(ok), closed_(closed), gone_(gone) {}
    EncodeGate* gate_;  // set while this pass holds the gate
    bool ok_;
    bool closed_;
    bool gone_;
  };

  // Blocks while another large text is being tokenized (if few enough wait); the waiting pass
  // in the order they came. `text_bytes` is the whole request's text: a list of prompts each
  // under the size passes as one. `gone` (optional, polled every kPoll while waiting) says the
  // client has left: its place is given up at once.
  Pass Enter(size_t text_bytes, const std::function<bool()>& gone = nullptr) {
    if (text_bytes < large_bytes_) return Pass(nullptr, true);
    std::unique_lock<std::mutex> lock(mu_);
    if (closed_) return Pass(nullptr, false, true);
    if (!busy_ && queue_.empty()) {
      busy_ = true;
      return Pass(this, true);
    }
    if (static_cast<int>(queue_.size()) >= max_waiting_) return Pass(nullptr, false);
    const uint64_t ticket = next_ticket_++;
    queue_.push_back(ticket);
    while (true) {
      if (closed_) {
        Drop(ticket);
        return Pass(nullptr, false, true);
      }
      if (gone && gone()) {  // before entering: a text nobody reads is never tokenized
        Drop(ticket);
        ++abandoned_;
        return Pass(nullptr, false, false, true);
      }
      if (!busy_ && queue_.front() == ticket) {
        queue_.pop_front();
        busy_ = true;
        return Pass(this, true);
      }
      cv_.wait_for(lock, kPoll);
    }
  }

  // Refuses the texts waiting now and every large one after; the tokenizing that polls closed()
  // stops.
  void Close() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      closed_ = true;
    }
    cv_.notify_all();
  }

  bool closed() {
    std::lock_guard<std::mutex> lock(mu_);
    return closed_;
  }

  // How many wait now (/metrics, tests).
  int waiting() {
    std::lock_guard<std::mutex> lock(mu_);
    return static_cast<int>(queue_.size());
  }
  // Whether a large text is being tokenized now (/metrics).
  bool busy() {
    std::lock_guard<std::mutex> lock(mu_);
    return busy_;
  }
  // Large texts dropped because their client left, waiting or being tokenized (/metrics).
  int64_t abandoned() {
    std::lock_guard<std::mutex> lock(mu_);
    return abandoned_;
  }
  // A text that held the gate stopped being tokenized because its client left.
  void CountAbandoned() {
    std::lock_guard<std::mutex> lock(mu_);
    ++abandoned_;
  }

  static constexpr std::chrono::milliseconds kPoll{50};

 private:
  void Leave() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      busy_ = false;
    }
    cv_.notify_all();  // the first in line takes it (at most kMaxWaiting wake)
  }
  // A waiter leaves the line (mu_ held); the next may now be first.
  void Drop(uint64_t ticket) {
    queue_.erase(std::find(queue_.begin(), queue_.end(), ticket));
    cv_.notify_all();
  }

  const size_t large_bytes_;
  int max_waiting_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool busy_ = false;
  bool closed_ = false;
  int64_t abandoned_ = 0;
  std::deque<uint64_t> queue_;  // the waiting, first come first
  uint64_t next_ticket_ = 0;
};

}  // namespace loom::server
