// ThreadPool: spin-then-sleep workers claiming tasks from a shared atomic counter.
#include "base/thread_pool.h"

#include <sched.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <utility>
#include <vector>

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

// The first whitespace-separated words of a small kernel file (procfs and sysfs files report no
// size, so ReadFileBounded does not read them); empty when it cannot be read.
std::vector<std::string> Words(const std::string& path, int count) {
  std::vector<std::string> out;
  FILE* f = std::fopen(path.c_str(), "r");
  if (f == nullptr) return out;
  char word[64];
  while (static_cast<int>(out.size()) < count && std::fscanf(f, "%63s", word) == 1) {
    out.emplace_back(word);
  }
  std::fclose(f);
  return out;
}

// CPUs a quota of `quota` µs per `period` µs allows, rounded up; 0 for none ("max", -1).
int QuotaCores(const std::string& quota, const std::string& period) {
  const long long q = std::atoll(quota.c_str()), p = std::atoll(period.c_str());
  if (q <= 0 || p <= 0) return 0;
  const long long cores = q / p + (q % p != 0);  // no q + p - 1: it could wrap
  return static_cast<int>(std::min<long long>(cores, 1 << 20));
}

// The CFS quota of the process's cgroup, in whole CPUs (0 without one): v2 `cpu.max`
// ("QUOTA PERIOD"), else v1 `cpu.cfs_quota_us` / `cpu.cfs_period_us`, at the paths
// /proc/self/cgroup names (as the container sees them), then at the hierarchy's root.
int CgroupCpuQuota() {
  std::string v1, v2;
  if (FILE* f = std::fopen("/proc/self/cgroup", "r")) {
    char line[512];
    while (std::fgets(line, sizeof(line), f) != nullptr) {  // "0::/path", "3:cpu,cpuacct:/path"
      std::string l(line);
      while (!l.empty() && (l.back() == '\n' || l.back() == '\r')) l.pop_back();
      const size_t a = l.find(':');
      const size_t b = a == std::string::npos ? a : l.find(':', a + 1);
      if (b == std::string::npos) continue;
      std::string controllers(1, ',');  // ",cpu,cpuacct," (built so: GCC 12 misreads "," + …)
      controllers.append(l, a + 1, b - a - 1);
      controllers += ',';
      if (l.compare(0, a, "0") == 0 && controllers == ",,") v2 = l.substr(b + 1);
      if (controllers.find(",cpu,") != std::string::npos) v1 = l.substr(b + 1);
    }
    std::fclose(f);
  }
  for (const std::string& dir : {"/sys/fs/cgroup" + v2, std::string("/sys/fs/cgroup")}) {
    const std::vector<std::string> max = Words(dir + "/cpu.max", 2);
    if (max.size() == 2) return QuotaCores(max[0], max[1]);
  }
  for (const std::string& dir : {"/sys/fs/cgroup/cpu" + v1, std::string("/sys/fs/cgroup/cpu")}) {
    const std::vector<std::string> quota = Words(dir + "/cpu.cfs_quota_us", 1);
    const std::vector<std::string> period = Words(dir + "/cpu.cfs_period_us", 1);
    if (quota.size() == 1 && period.size() == 1) return QuotaCores(quota[0], period[0]);
  }
  return 0;
}

}  // namespace

int ThreadPool::UsableCores() {
  // hardware_concurrency counts the host's online CPUs: in a container limited to 2 of a 64-CPU
  // host that was 64 spinning compute threads. The affinity mask and the cgroup quota bound it.
  static const int cores = [] {
    int n = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0) {
      n = std::min(n, CPU_COUNT(&set));
    }
    if (const int quota = CgroupCpuQuota(); quota > 0) n = std::min(n, quota);
    return n;
  }();
  return cores;
}

int ThreadPool::CapThreads(int requested) {
  const int cores = UsableCores();
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
  }
  cv_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::RunTasks(int thread_index) {
  uint64_t c = claim_.load(std::memory_order_acquire);
  for (;;) {
    const uint64_t index = c & kIndexMask;
    const uint64_t count = (c >> kIndexBits) & kIndexMask;
    if (index >= count) return;
    // Success means the job is still the current one and task `index` was unclaimed: the job
    // cannot end (nor fn_ change) before this task counts as done.
    if (!claim_.compare_exchange_weak(c, c + 1, std::memory_order_acq_rel,
                                      std::memory_order_acquire)) {
      continue;
    }
    int64_t finished = 1;
    try {
      (*fn_)(first_ + static_cast<int64_t>(index), thread_index);
    } catch (...) {
      // Uncaught on a worker it would be std::terminate; unwinding the caller out of
      // ParallelFor while workers still ran fn_ would be worse. Skip the rest (counted as done),
      // keep the first exception.
      {
        std::lock_guard<std::mutex> lock(error_mu_);
        if (!error_) error_ = std::current_exception();
      }
      uint64_t cur = claim_.load(std::memory_order_acquire);
      while ((cur >> (2 * kIndexBits)) == (c >> (2 * kIndexBits))) {  // still this job
        const uint64_t i = cur & kIndexMask, n = (cur >> kIndexBits) & kIndexMask;
        if (i >= n) break;
        if (claim_.compare_exchange_weak(cur, cur - i + n, std::memory_order_acq_rel,
                                         std::memory_order_acquire)) {
          finished += static_cast<int64_t>(n - i);
          break;
        }
      }
    }
    done_.fetch_add(finished, std::memory_order_release);
    c = claim_.load(std::memory_order_acquire);
  }
}

void ThreadPool::WorkerLoop(int thread_index) {
  for (;;) {
    // Spin first: the next job of a decode step usually arrives within microseconds. A job is
    // found by its claim word; the generation only wakes sleepers.
    bool found = false;
    for (int spin = 0; spin < 20000; ++spin) {
      if (stop_.load(std::memory_order_acquire)) return;
      const uint64_t c = claim_.load(std::memory_order_acquire);
      if ((c & kIndexMask) < ((c >> kIndexBits) & kIndexMask)) {
        found = true;
        break;
      }
      LOOM_PAUSE();
    }
    if (!found) {
      // Jobs are published under mu_, so checking under it loses no wake-up.
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] {
        const uint64_t c = claim_.load(std::memory_order_acquire);
        return stop_.load() || (c & kIndexMask) < ((c >> kIndexBits) & kIndexMask);
      });
    }
    if (stop_.load()) return;
    RunTasks(thread_index);
  }
}

void ThreadPool::RunJob(int64_t first, int64_t num_tasks,
                        const std::function<void(int64_t, int)>& fn) {
  fn_ = &fn;
  first_ = first;
  done_.store(0, std::memory_order_relaxed);
  job_ = (job_ + 1) & ((uint64_t{1} << (64 - 2 * kIndexBits)) - 1);
  const uint64_t word =
      (job_ << (2 * kIndexBits)) | (static_cast<uint64_t>(num_tasks) << kIndexBits);
  {
    std::lock_guard<std::mutex> lock(mu_);
    claim_.store(word, std::memory_order_release);  // publishes fn_, first_ and done_ = 0
  }
  cv_.notify_all();
  RunTasks(0);
  // Only tasks some worker claimed are waited for (each a few microseconds in a decode step).
  while (done_.load(std::memory_order_acquire) < num_tasks) LOOM_PAUSE();
}

void ThreadPool::ParallelFor(int64_t num_tasks, const std::function<void(int64_t, int)>& fn) {
  if (num_tasks <= 0) return;
  // Another thread's job holds the workers: run this one inline rather than corrupt theirs.
  std::unique_lock<std::mutex> owner(run_mu_, std::try_to_lock);
  if (num_threads_ == 1 || num_tasks == 1 || !owner.owns_lock()) {
    for (int64_t t = 0; t < num_tasks; ++t) fn(t, 0);
    return;
  }
  // Jobs of at most kMaxJobTasks tasks (the claim word's index field), one after another.
  for (int64_t first = 0; first < num_tasks; first += kMaxJobTasks) {
    RunJob(first, std::min(kMaxJobTasks, num_tasks - first), fn);
    std::lock_guard<std::mutex> lock(error_mu_);
    if (error_) break;
  }
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
