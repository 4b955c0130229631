// A DeferredReply and StreamSource whose content another thread adds (the transport tests and the http_transport fuzz target).
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "server/http_exchange.h"

namespace loom::server {

// Ready (and Pull's end) once Add(…, last = true); counts how often it was abandoned. Each Add is
// one piece (an event): a Pull takes whole pieces up to its bound.
struct Feed : DeferredReply, StreamSource {
  std::mutex mu;
  std::deque<std::string> pending;
  bool finished = false;
  std::atomic<int> abandoned{0};
  // NextPullIsLarge's answer, for the next Pull only; the thread each Pull ran on and the one
  // the large Pull ran on; a delay inside a large Pull (to wake the stream while it runs).
  std::atomic<bool> large{false};
  std::vector<std::thread::id> pulled_on;
  std::thread::id large_on;
  int large_pull_ms = 0;
  std::atomic<bool> overrun{false};  // Overrun's answer
  size_t pulled_bytes = 0;           // all Pulls together
  size_t max_pulled = 0;             // the most one Pull gave

  bool Ready() override {
    std::lock_guard<std::mutex> lock(mu);
    return finished;
  }
  HttpResponse Build() override {
    std::lock_guard<std::mutex> lock(mu);
    HttpResponse r;
    r.content_type = "text/plain";
    for (const std::string& piece : pending) r.body += piece;
    return r;
  }
  bool NextPullIsLarge() override { return large.load(); }
  bool Overrun() override { return overrun.load(); }
  bool Pull(std::string* out, size_t max_bytes) override {
    const bool was_large = large.exchange(false);
    bool done = false;
    {
      std::lock_guard<std::mutex> lock(mu);
      if (was_large) large_on = std::this_thread::get_id();
      pulled_on.push_back(std::this_thread::get_id());
      const size_t from = out->size();
      while (!pending.empty() && out->size() - from < max_bytes) {
        *out += pending.front();
        pending.pop_front();
      }
      pulled_bytes += out->size() - from;
      max_pulled = std::max(max_pulled, out->size() - from);
      done = finished && pending.empty();
    }
    // A large chunk takes a while to build: what is added meanwhile waits for the next Pull.
    if (was_large && large_pull_ms > 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(large_pull_ms));
    }
    return done;
  }
  void Abandon() override { abandoned.fetch_add(1); }
  void Add(const std::string& s, bool last) {
    std::lock_guard<std::mutex> lock(mu);
    pending.push_back(s);
    finished = last;
  }
};

}  // namespace loom::server
