// A DeferredReply and StreamSource whose content another thread adds (the transport tests and the http_transport fuzz target).
#pragma once

#include <atomic>
#include <mutex>
#include <string>

#include "server/http_exchange.h"

namespace loom::server {

// Ready (and Pull's end) once Add(…, last = true); counts how often it was abandoned.
struct Feed : DeferredReply, StreamSource {
  std::mutex mu;
  std::string pending;
  bool finished = false;
  std::atomic<int> abandoned{0};

  bool Ready() override {
    std::lock_guard<std::mutex> lock(mu);
    return finished;
  }
  HttpResponse Build() override {
    std::lock_guard<std::mutex> lock(mu);
    HttpResponse r;
    r.content_type = "text/plain";
    r.body = pending;
    return r;
  }
  bool Pull(std::string* out) override {
    std::lock_guard<std::mutex> lock(mu);
    *out += pending;
    pending.clear();
    return finished;
  }
  void Abandon() override { abandoned.fetch_add(1); }
  void Add(const std::string& s, bool last) {
    std::lock_guard<std::mutex> lock(mu);
    pending += s;
    finished = last;
  }
};

}  // namespace loom::server
