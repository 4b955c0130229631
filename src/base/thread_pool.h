// Fork-join worker pool for the compute inside one engine step (parallel-for over ranges).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace loom {

// Thread-safety: ParallelFor may be called from any thread. One caller at a time gets the
// workers (the engine thread, normally); a call made while another runs (an adapter loading on
// an HTTP thread, say) runs its tasks inline on its own thread, so two jobs never share the
// workers. Task functions must keep per-thread scratch in thread_local storage: the thread
// index passed to them is 0 for an inline caller too.
// Workers spin briefly between jobs (a decode step issues hundreds of short jobs; a
// condition-variable wake-up per job would cost several percent), then sleep. A job ends when
// its tasks are done, not when every worker has checked in: a worker the OS keeps off its core
// (another busy process, handler threads tokenizing) and that claimed nothing is not waited for.
class ThreadPool {
 public:
  // num_threads includes the calling thread; 0 = hardware concurrency. More than the hardware
  // has is capped to it (with a warning on stderr); if the OS refuses a thread, the pool runs
  // with the ones it got.
  explicit ThreadPool(int num_threads = 0);
  // The thread count a request for `requested` gets (0 or less: all cores).
  static int CapThreads(int requested);
  // The cores this process may use: the online CPUs, bounded by its affinity mask and its
  // cgroup's CPU quota (a container limited to 2 CPUs of a large host gets 2). Read once.
  static int UsableCores();
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return num_threads_; }

  // Calls fn(task, thread_index) for every task in [0, num_tasks); tasks are claimed
  // dynamically so uneven work balances. Returns when all are done.
  void ParallelFor(int64_t num_tasks, const std::function<void(int64_t, int)>& fn);

  // Process-wide pool used by ops (sized by LOOM_THREADS or the core count).
  static ThreadPool& Global();
  static void SetGlobalThreads(int num_threads);

 private:
  void WorkerLoop(int thread_index);
  // Claims and runs tasks of the current job until none is left.
  void RunTasks(int thread_index);
  // The claim word: job number (24 bits), task count (20 bits), next task index (20 bits). A
  // worker claims task i of job j only by a compare-and-swap on the whole word, so it can
  // never run a task of a job that has ended, whatever it read before (job numbers wrap at
  // 2^24: a worker would have to stall between its load and its swap for 16 M jobs, minutes of
  // the engine running without it, and then meet the same count and index).
  static constexpr int kIndexBits = 20;
  static constexpr uint64_t kIndexMask = (uint64_t{1} << kIndexBits) - 1;
  static constexpr int64_t kMaxJobTasks = static_cast<int64_t>(kIndexMask);
  void RunJob(int64_t first, int64_t num_tasks, const std::function<void(int64_t, int)>& fn);

  int num_threads_;
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::mutex run_mu_;  // held by the caller that owns the workers for one ParallelFor
  std::condition_variable cv_;
  std::atomic<uint64_t> claim_{0};  // see kIndexBits
  std::atomic<int64_t> done_{0};    // tasks of the current job finished (or skipped)
  std::atomic<bool> stop_{false};
  uint64_t job_ = 0;   // the caller's job counter (24 bits used)
  int64_t first_ = 0;  // the current job's first task index in the call
  const std::function<void(int64_t, int)>* fn_ = nullptr;
  // The first exception a task threw in this ParallelFor (workers included): the remaining
  // tasks are skipped, the workers finish, and ParallelFor rethrows it on its caller's thread.
  std::mutex error_mu_;
  std::exception_ptr error_;
};

}  // namespace loom
