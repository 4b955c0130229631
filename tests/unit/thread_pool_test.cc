// ThreadPool: concurrent ParallelFor callers (engine thread + an adapter loading on an HTTP
// thread) each run every one of their tasks exactly once, and never hang.
#include "base/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <thread>
#include <vector>

namespace loom {
namespace {

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

}  // namespace
}  // namespace loom
