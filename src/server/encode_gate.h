// EncodeGate: at most one large text is tokenized at a time, and only a few wait for it.
#pragma once

#include <algorithm>
#include <condition_variable>
#include <cstddef>
#include <mutex>

namespace loom::server {

// Tokenizing costs ~1 µs and ~35 bytes per byte of one long word (an 8 MiB run of letters
// takes ~8 s and ~330 MB); a handler thread does it. Without a bound, 16 such prompts sent at
// once would hold every handler thread and both cores for a minute, and several GB, while small
// requests waited for a thread. Texts of at least `large_bytes` go through this gate one at a
// time; at most `max_waiting` wait for it, and a text beyond that is refused (503, retry later),
// so most handler threads stay free for everything else. Smaller texts never wait. Close() (the
// drain deadline) refuses the waiting ones and every later large text.
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
    Pass(Pass&& o) noexcept : gate_(o.gate_), ok_(o.ok_), closed_(o.closed_) { o.gate_ = nullptr; }
    Pass& operator=(Pass&&) = delete;
    ~Pass() {
      if (gate_ != nullptr) gate_->Leave();
    }
    bool ok() const { return ok_; }
    bool closed() const { return closed_; }  // refused because the gate was closed

   private:
    friend class EncodeGate;
    Pass(EncodeGate* gate, bool ok, bool closed = false) : gate_(gate), ok_(ok), closed_(closed) {}
    EncodeGate* gate_;  // set while this pass holds the gate
    bool ok_;
    bool closed_;
  };

  // Blocks while another large text is being tokenized (if few enough wait). `text_bytes` is
  // the whole request's text: a list of prompts each under the size passes as one.
  Pass Enter(size_t text_bytes) {
    if (text_bytes < large_bytes_) return Pass(nullptr, true);
    std::unique_lock<std::mutex> lock(mu_);
    if (closed_) return Pass(nullptr, false, true);
    if (busy_ && waiting_ >= max_waiting_) return Pass(nullptr, false);
    ++waiting_;
    cv_.wait(lock, [this] { return !busy_ || closed_; });
    --waiting_;
    if (closed_) return Pass(nullptr, false, true);
    busy_ = true;
    return Pass(this, true);
  }

  // Refuses the texts waiting now and every large one after (the text being tokenized goes on).
  void Close() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      closed_ = true;
    }
    cv_.notify_all();
  }

  // How many wait now (/metrics, tests).
  int waiting() {
    std::lock_guard<std::mutex> lock(mu_);
    return waiting_;
  }
  // Whether a large text is being tokenized now (/metrics).
  bool busy() {
    std::lock_guard<std::mutex> lock(mu_);
    return busy_;
  }

 private:
  void Leave() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      busy_ = false;
    }
    cv_.notify_one();
  }

  const size_t large_bytes_;
  int max_waiting_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool busy_ = false;
  bool closed_ = false;
  int waiting_ = 0;
};

}  // namespace loom::server
