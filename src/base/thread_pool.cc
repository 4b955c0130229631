// ThreadPool: spin-then-sleep workers claiming tasks from a shared atomic counter.
#include "base/thread_pool.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <utility>

#if defined(__x86_64__)
#include <immintrin.h>
#define LOOM_PAUSE() _mm_pause()
#else
#define LOOM_PAUSE() std::this_thread::yield()
#endif

namespace loom {

namespace {
std::unique_ptr<ThreadPool>& GlobalSlot() {
  static std::unique_ptr<ThreadPool> pool;
  return pool;
}
std::mutex& GlobalMutex() {  // first use of Global() may race between threads
  static std::mutex mu;
  return mu;
}
}  // namespace

int ThreadPool::CapThreads(int requested) {
  const int cores = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  if (requested <= 0) return cores;
  if (requested > cores) {
    // More compute threads than cores only adds contention (and 100000 threads would exhaust
    // the process's thread limit).
    std::fprintf(stderr, "warning: %d threads requested, this machine has %d cores; using %d\n",
                 requested, cores, cores);
    return cores;
  }
  return requested;
}

ThreadPool::ThreadPool(int num_threads) {
  num_threads_ = CapThreads(num_threads);
  for (int i = 1; i < num_threads_; ++i) {
    try {
      workers_.emplace_back([this, i] { WorkerLoop(i); });
    } catch (const std::exception& e) {  // std::system_error: the OS refused another thread
      std::fprintf(stderr, "warning: could not start compute thread %d (%s); using %d threads\n",
                   i, e.what(), i);
      num_threads_ = i;
      break;
    }
  }
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_.store(true);
    generation_.fetch_add(1);
  }
  cv_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::RunTasks(int thread_index) {
  for (;;) {
    int64_t task = next_task_.fetch_add(1, std::memory_order_relaxed);
    if (task >= num_tasks_) break;
    try {
      (*fn_)(task, thread_index);
    } catch (...) {
      // Uncaught on a worker it would be std::terminate; unwinding the caller out of
      // ParallelFor while workers still ran fn_ would be worse. Skip the rest, keep the first.
      std::lock_guard<std::mutex> lock(error_mu_);
      if (!error_) error_ = std::current_exception();
      next_task_.store(num_tasks_, std::memory_order_relaxed);
    }
  }
}

void ThreadPool::WorkerLoop(int thread_index) {
  uint64_t seen = 0;
  for (;;) {
    // Spin first: the next job of a decode step usually arrives within microseconds.
    uint64_t gen = generation_.load(std::memory_order_acquire);
    for (int spin = 0; gen == seen && spin < 20000; ++spin) {
      LOOM_PAUSE();
      gen = generation_.load(std::memory_order_acquire);
    }
    if (gen == seen) {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return generation_.load(std::memory_order_acquire) != seen; });
      gen = generation_.load(std::memory_order_acquire);
    }
    seen = gen;
    if (stop_.load()) return;
    RunTasks(thread_index);
    pending_workers_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

void ThreadPool::ParallelFor(int64_t num_tasks, const std::function<void(int64_t, int)>& fn) {
  if (num_tasks <= 0) return;
  // Another thread's job holds the workers: run this one inline rather than corrupt theirs.
  std::unique_lock<std::mutex> owner(run_mu_, std::try_to_lock);
  if (num_threads_ == 1 || num_tasks == 1 || !owner.owns_lock()) {
    for (int64_t t = 0; t < num_tasks; ++t) fn(t, 0);
    return;
  }
  fn_ = &fn;
  num_tasks_ = num_tasks;
  next_task_.store(0, std::memory_order_relaxed);
  pending_workers_.store(num_threads_ - 1, std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> lock(mu_);
    generation_.fetch_add(1, std::memory_order_acq_rel);
  }
  cv_.notify_all();
  RunTasks(0);
  while (pending_workers_.load(std::memory_order_acquire) != 0) LOOM_PAUSE();
  std::exception_ptr error;
  {
    std::lock_guard<std::mutex> lock(error_mu_);
    error = std::exchange(error_, nullptr);
  }
  if (error) std::rethrow_exception(error);
}

ThreadPool& ThreadPool::Global() {
  std::lock_guard<std::mutex> lock(GlobalMutex());
  auto& slot = GlobalSlot();
  if (!slot) {
    int n = 0;
    if (const char* env = std::getenv("LOOM_THREADS")) {
      char* end = nullptr;
      const long v = std::strtol(env, &end, 10);
      if (end != env && *end == '\0' && v > 0) {
        n = static_cast<int>(std::min<long>(v, 1 << 20));
      } else {  // as LOOM_ISA: a value that is not used is said, not ignored silently
        std::fprintf(stderr, "warning: LOOM_THREADS='%.40s' is not a positive integer; using all cores\n", env);
      }
    }
    slot = std::make_unique<ThreadPool>(n);
  }
  return *slot;
}

void ThreadPool::SetGlobalThreads(int num_threads) {
  std::lock_guard<std::mutex> lock(GlobalMutex());
  GlobalSlot() = std::make_unique<ThreadPool>(num_threads);
}

}  // namespace loom
