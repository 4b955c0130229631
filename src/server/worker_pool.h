// The HTTP handler threads: an io_context run by N threads started one by one, so a thread the
// system refuses stops the ones started and names --http-threads (asio::thread_pool hung there).
#pragma once

#include <utility>  // before Boost: asio/awaitable.hpp uses std::exchange without it

#include <boost/asio.hpp>
#include <optional>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

namespace loom::server {

// Thread-safety: post from any thread; Join and the destructor from the owner only.
class WorkerPool {
 public:
  // Starts `n` threads. When one cannot start (RLIMIT_NPROC, an address-space limit, a cgroup's
  // pids.max), the threads already running are stopped and joined and std::system_error is
  // thrown naming the flag. (asio::thread_pool's constructor threw there with its started
  // threads still waiting for work, and joining them in its destructor never returned.)
  explicit WorkerPool(int n) : guard_(std::in_place, ctx_.get_executor()) {
    threads_.reserve(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) {
      try {
        threads_.emplace_back([this] { ctx_.run(); });
      } catch (const std::system_error& e) {
        Abandon();
        throw std::system_error(e.code(), "--http-threads " + std::to_string(n) +
                                              ": could not start handler thread " +
                                              std::to_string(i + 1));
      } catch (...) {
        Abandon();
        throw;
      }
    }
  }
  ~WorkerPool() { Abandon(); }
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  boost::asio::io_context& context() { return ctx_; }
  // Lets the threads end once the queued tasks are done, and waits for them.
  void Join() {
    guard_.reset();
    for (std::thread& t : threads_) {
      if (t.joinable()) t.join();
    }
  }

 private:
  void Abandon() {
    ctx_.stop();
    Join();
  }

  boost::asio::io_context ctx_;
  std::optional<boost::asio::executor_work_guard<boost::asio::io_context::executor_type>> guard_;
  std::vector<std::thread> threads_;
};

}  // namespace loom::server
