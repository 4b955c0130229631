// Splits a panel-layout (16-column) quantized matmul over the worker pool: activation rows to quantize, output column blocks with the epilogue run per block.
#pragma once

#include <algorithm>
#include <cstdint>

#include "base/thread_pool.h"
#include "ops/epilogue_region.h"
#include "ops/matmul.h"

namespace loom {

// Calls kernel(j0, j1) for column blocks of whole panels (multiples of 64 columns but the last,
// which ends at m), then the epilogue on the same thread while the block is hot (its pre tasks
// first, in the same region: ops/epilogue_region.h). With `rows` activation rows:
// - one row (decode at batch 1, memory-bound): one block per worker, so each core streams one
//   long contiguous run of panels. 8 blocks per worker, claimed in turn, made each core's stream
//   jump every few panels: int4 decode (0.5B shape, int4 + head, Zen 2, 2 threads) 82.8 → 86.7
//   tok/s median of 6 interleaved runs; int8 unchanged (already at the roofline);
// - more rows (compute-bound): ~8 blocks per worker, which balances uneven cores (one block per
//   worker was 6 % slower at batch 8).
template <typename Kernel>
void ForEachPanelBlock(int64_t m, int64_t rows, const MatmulEpilogue* epilogue,
                       const Kernel& kernel) {
  ThreadPool& pool = ThreadPool::Global();
  const int64_t target_tasks = static_cast<int64_t>(pool.num_threads()) * (rows == 1 ? 1 : 8);
  int64_t block = std::max<int64_t>(64, (m + target_tasks - 1) / target_tasks);
  block = (block + 63) / 64 * 64;
  const int64_t num_tasks = (m + block - 1) / block;
  ParallelBlocks(num_tasks, epilogue, [&](int64_t task) {
    const int64_t j0 = task * block;
    const int64_t j1 = std::min(m, j0 + block);
    kernel(j0, j1);
    return std::make_pair(j0, j1);
  });
}

// Calls fn(r0, r1) over ranges of the n activation rows: inline below `min_rows` rows (by
// default kParallelRowsMin; decode: a pool hand-off costs more than quantizing a few rows), else
// over the pool. Run inline, quantizing a 128-row prefill chunk took 4–5 % of an int8 prefill
// while the other core waited. Each row's result must depend on that row alone (same bits on
// any thread).
inline constexpr int64_t kParallelRowsMin = 16;
template <typename Fn>
void ForEachRowRange(int64_t n, const Fn& fn, int64_t min_rows = kParallelRowsMin) {
  ThreadPool& pool = ThreadPool::Global();
  if (n < std::max<int64_t>(min_rows, 2) || pool.num_threads() == 1) {
    fn(int64_t{0}, n);
    return;
  }
  // About 4 rows a task, at most 4 tasks a thread; at least 2 (n ≥ 2 here: 2-3 AMX groups).
  const int64_t tasks =
      std::max<int64_t>(2, std::min<int64_t>(n / 4, static_cast<int64_t>(pool.num_threads()) * 4));
  const int64_t per = (n + tasks - 1) / tasks;
  pool.ParallelFor((n + per - 1) / per, [&](int64_t task, int) {
    fn(task * per, std::min(n, (task + 1) * per));
  });
}

}  // namespace loom
