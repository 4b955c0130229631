// Runs a matmul's column blocks over the worker pool with its epilogue: the pre tasks first, in the same parallel region, then each block followed by its epilogue once every pre task is done.
#pragma once

#include <atomic>
#include <cstdint>
#include <utility>

#include "base/thread_pool.h"
#include "ops/matmul.h"

namespace loom {

namespace internal {
inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}
}  // namespace internal

// kernel(b) computes block b (0 ≤ b < num_blocks) and returns its columns [j0, j1).
// Deadlock-free without any assumption on the thread count: the pool claims tasks in index
// order and the pre tasks come first, so when a block waits, each pre task is running on some
// thread (or, run inline, already done).
template <typename Kernel>
void ParallelBlocks(int64_t num_blocks, const MatmulEpilogue* epilogue, const Kernel& kernel) {
  const int64_t pre = epilogue && epilogue->pre ? epilogue->pre_tasks : 0;
  const bool post = epilogue && epilogue->block;
  std::atomic<int64_t> pre_done{0};
  ThreadPool::Global().ParallelFor(pre + num_blocks, [&](int64_t task, int) {
    if (task < pre) {
      epilogue->pre(task);
      pre_done.fetch_add(1, std::memory_order_release);
      return;
    }
    const std::pair<int64_t, int64_t> cols = kernel(task - pre);
    if (!post) return;
    while (pre_done.load(std::memory_order_acquire) < pre) internal::CpuRelax();
    epilogue->block(cols.first, cols.second);
  });
}

// The same on the calling thread alone (a matmul too small to repay waking the workers).
template <typename Kernel>
void SerialBlocks(int64_t num_blocks, const MatmulEpilogue* epilogue, const Kernel& kernel) {
  if (epilogue && epilogue->pre) {
    for (int64_t t = 0; t < epilogue->pre_tasks; ++t) epilogue->pre(t);
  }
  for (int64_t b = 0; b < num_blocks; ++b) {
    const std::pair<int64_t, int64_t> cols = kernel(b);
    if (epilogue && epilogue->block) epilogue->block(cols.first, cols.second);
  }
}

}  // namespace loom
