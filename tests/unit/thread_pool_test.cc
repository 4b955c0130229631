// ThreadPool: concurrent ParallelFor callers (engine thread + an adapter loading on an HTTP
// thread) each run every one of their tasks exactly once, and never hang.
#include "base/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>
#include <string>
#include <stdexcept>
#include <thread>
#include <vector>

namespace loom {
namespace {

// The cores are those the process may run on: hardware_concurrency counted the host's CPUs, so
// a process pinned to one (or a container limited to 2 of 64) ran a compute thread per host CPU.
// The CLI pinned to CPU 0 takes one thread and says so.
TEST(ThreadPool, UsableCoresFollowTheAffinityMask) {
  EXPECT_GE(ThreadPool::UsableCores(), 1);
  EXPECT_LE(ThreadPool::UsableCores(), static_cast<int>(std::thread::hardware_concurrency()));
  if (std::system("command -v taskset >/dev/null 2>&1") != 0) GTEST_SKIP() << "no taskset";
  const std::string cmd = std::string("taskset -c 0 ") + LOOM_BINARY +
                          " --threads 2 generate --model " + LOOM_FIXTURES +
                          "/models/llama_f32 --prompt-tokens 1,2 --max-tokens 1 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[512];
  while (std::fgets(buf, sizeof(buf), p) != nullptr) out += buf;
  ASSERT_EQ(pclose(p), 0) << out;
  EXPECT_NE(out.find("2 threads requested, this machine has 1 cores; using 1"), std::string::npos)
      << out;
}

TEST(ThreadPool, ConcurrentCallersEachRunAllTheirTasksOnce) {
  ThreadPool pool(2);
  constexpr int kRounds = 300;
  constexpr int kTasks = 64;
  auto caller = [&](std::vector<std::atomic<int>>* counts) {
    for (int r = 0; r < kRounds; ++r) {
      pool.ParallelFor(kTasks, [&](int64_t t, int) {
        volatile double x = 1;  // a little work, so the jobs overlap in time
        for (int i = 0; i < 2000; ++i) x = x * 1.0000001 + 1e-9;
        (*counts)[static_cast<size_t>(t)]++;
      });
    }
  };
  std::vector<std::atomic<int>> a(kTasks), b(kTasks), c(kTasks);
  std::thread t1(caller, &a), t2(caller, &b), t3(caller, &c);
  t1.join();
  t2.join();
  t3.join();
  for (int t = 0; t < kTasks; ++t) {
    EXPECT_EQ(a[static_cast<size_t>(t)].load(), kRounds);
    EXPECT_EQ(b[static_cast<size_t>(t)].load(), kRounds);
    EXPECT_EQ(c[static_cast<size_t>(t)].load(), kRounds);
  }
}

// A task that throws, on a worker or on the caller's thread: ParallelFor waits for the workers
// and rethrows it to its caller (it was std::terminate on a worker), and the pool runs the
// next job whole.
TEST(ThreadPool, AnExceptionInATaskReachesTheCallerAndThePoolGoesOn) {
  ThreadPool pool(2);
  for (int round = 0; round < 50; ++round) {
    const int64_t bad = round % 8;
    EXPECT_THROW(pool.ParallelFor(8,
                                  [&](int64_t t, int) {
                                    if (t == bad) throw std::runtime_error("task failed");
                                  }),
                 std::runtime_error);
    std::vector<std::atomic<int>> counts(32);
    pool.ParallelFor(32, [&](int64_t t, int) { counts[static_cast<size_t>(t)]++; });
    for (const auto& c : counts) EXPECT_EQ(c.load(), 1);
  }
}

// Many tiny jobs back to back (a decode step's pattern): every task runs exactly once, though
// a job may end while a worker is still looking at the one before (the claim word's job
// number keeps it off the new one's tasks until it reads the new word).
TEST(ThreadPool, ManyTinyJobsEachRunEveryTaskOnce) {
  ThreadPool pool(2);
  std::vector<int> counts(3);
  for (int job = 0; job < 100000; ++job) {
    const int64_t n = 2 + job % 2;
    pool.ParallelFor(n, [&](int64_t t, int) { counts[static_cast<size_t>(t)]++; });
  }
  EXPECT_EQ(counts[0], 100000);
  EXPECT_EQ(counts[1], 100000);
  EXPECT_EQ(counts[2], 50000);
}

// More tasks than one job's claim word holds (2^20 - 1): run as consecutive jobs, each task once.
TEST(ThreadPool, MoreTasksThanOneJobHolds) {
  ThreadPool pool(2);
  const int64_t n = 2500000;
  std::vector<std::atomic<uint8_t>> seen(static_cast<size_t>(n));
  pool.ParallelFor(n, [&](int64_t t, int) { seen[static_cast<size_t>(t)]++; });
  int64_t once = 0;
  for (const auto& s : seen) once += s.load() == 1;
  EXPECT_EQ(once, n);
}

}  // namespace
}  // namespace loom
