// The LoRA shrink as pre tasks of a matmul's region: rank-cut decode tasks give the uncut kernel's bits, and blocks see every pre task done, also when the region runs inline.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "base/thread_pool.h"
#include "cpu/cpu_features.h"
#include "cpu/lora_cpu.h"
#include "kernel_test_util.h"
#include "ops/epilogue_region.h"
#include "ops/lora_ops.h"
#include "tensor/dtype.h"
#include "tensor/tensor.h"

namespace loom {
namespace {

// Decode rows (one-row jobs of ranks 16, 12 and 5) and a 6-row job, cut into as many tasks as
// asked: every t[r, k] has the bits of the whole job's shrink run by the kernel at once.
TEST(LoraShrinkPlan, RankCutTasksGiveTheUncutBits) {
  const int64_t in = 203;  // not a multiple of 8 or 16: the kernels' tails run too
  for (DType dt : {DType::kF32, DType::kBF16}) {
    struct Job {
      int rank;
      int64_t rows;
      std::vector<uint8_t> a;
      std::vector<float> x;
      Tensor at;
    };
    std::vector<Job> spec(4);
    const int ranks[] = {16, 12, 5, 16};
    const int64_t rows[] = {1, 1, 1, 6};
    for (size_t j = 0; j < spec.size(); ++j) {
      Job& s = spec[j];
      s.rank = ranks[j];
      s.rows = rows[j];
      auto af = RandomNonZeroMean(static_cast<size_t>(s.rank * in), 10 + static_cast<uint32_t>(j));
      s.a.resize(af.size() * DTypeSize(dt));
      ConvertFromF32(dt, af.data(), s.a.data(), static_cast<int64_t>(af.size()));
      s.x = RandomNonZeroMean(static_cast<size_t>(s.rows * in), 20 + static_cast<uint32_t>(j));
      s.at = Tensor{dt, {s.rank, in}, s.a.data()};
    }
    for (int min_tasks : {1, 2, 5, 9, 64}) {
      SCOPED_TRACE(std::string(DTypeName(dt)) + ", at least " + std::to_string(min_tasks) + " tasks");
      std::vector<std::vector<float>> t(spec.size()), want(spec.size());
      std::vector<LoraShrinkJob> jobs;
      for (size_t j = 0; j < spec.size(); ++j) {
        t[j].assign(static_cast<size_t>(spec[j].rows * spec[j].rank), -1.0f);
        want[j].resize(t[j].size());
        cpu::LoraShrink(cpu::ActiveIsa(), spec[j].x.data(), spec[j].rows, in, dt, spec[j].a.data(),
                        spec[j].rank, want[j].data());
        jobs.push_back({spec[j].x.data(), spec[j].rows, &spec[j].at, t[j].data()});
      }
      LoraShrinkPlan plan;
      plan.Build(jobs.data(), jobs.size(), in, min_tasks);
      // One task per decode row and 2 of ≤ 4 rows for the 6-row job (5), then rank cuts in
      // multiples of 4 one at a time: ranks 16 → 4 × 4 and 12 → 3 × 4 at most, 5 never (10).
      EXPECT_EQ(plan.num_tasks(), std::max(5, std::min(min_tasks, 10)));
      for (int64_t i = plan.num_tasks() - 1; i >= 0; --i) plan.Run(i);  // any order
      for (size_t j = 0; j < spec.size(); ++j) {
        for (size_t e = 0; e < t[j].size(); ++e) ASSERT_EQ(t[j][e], want[j][e]) << "job " << j << " element " << e;
      }
    }
  }
}

// The FMA shrink kernel's tiles (1-4 rows × 1-4 ranks, each shape compiled on its own) give a
// row the same bits whatever rows it runs with, within rounding of a double-precision sum; and a
// plan built for a quantized base (amx = false) runs it at every row count, also where bf16 A
// and `in` would allow AMX (the same bits for a decode row and a prefill chunk).
TEST(LoraShrinkPlan, FmaTilesGiveEachRowItsOwnBits) {
  for (DType dt : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (int64_t in : {int64_t{203}, int64_t{896}}) {
      for (int rank : {16, 5, 3}) {
        SCOPED_TRACE(std::string(DTypeName(dt)) + ", in " + std::to_string(in) + ", rank " +
                     std::to_string(rank));
        auto af = RandomNonZeroMean(static_cast<size_t>(rank * in), 31);
        std::vector<uint8_t> a(af.size() * DTypeSize(dt));
        ConvertFromF32(dt, af.data(), a.data(), static_cast<int64_t>(af.size()));
        std::vector<float> aw(af.size());  // A as the kernel reads it
        ConvertToF32(dt, a.data(), aw.data(), static_cast<int64_t>(aw.size()));
        const int64_t rows = 9;
        const auto x = RandomNonZeroMean(static_cast<size_t>(rows * in), 32);
        std::vector<float> alone(static_cast<size_t>(rows * rank));
        for (int64_t r = 0; r < rows; ++r) {
          cpu::LoraShrink(cpu::ActiveIsa(), x.data() + r * in, 1, in, dt, a.data(), rank,
                          alone.data() + r * rank);
          for (int k = 0; k < rank; ++k) {
            double ref = 0, mag = 0;
            for (int64_t i = 0; i < in; ++i) {
              ref += static_cast<double>(x[static_cast<size_t>(r * in + i)]) *
                     aw[static_cast<size_t>(k * in + i)];
              mag += std::abs(static_cast<double>(x[static_cast<size_t>(r * in + i)]) *
                              aw[static_cast<size_t>(k * in + i)]);
            }
            ASSERT_NEAR(alone[static_cast<size_t>(r * rank + k)], ref, 1e-5 * mag + 1e-6);
          }
        }
        for (int64_t n = 2; n <= rows; ++n) {
          std::vector<float> t(static_cast<size_t>(n * rank), -1.0f);
          cpu::LoraShrink(cpu::ActiveIsa(), x.data(), n, in, dt, a.data(), rank, t.data());
          for (size_t e = 0; e < t.size(); ++e)
            ASSERT_EQ(t[e], alone[e]) << n << " rows, element " << e;
        }
        const Tensor at{dt, {rank, in}, a.data()};
        for (int64_t n : {int64_t{1}, int64_t{9}}) {
          std::vector<float> t(static_cast<size_t>(n * rank), -1.0f);
          const LoraShrinkJob job{x.data(), n, &at, t.data()};
          LoraShrinkPlan plan;
          plan.Build(&job, 1, in, 2, /*amx=*/false);
          for (int64_t i = 0; i < plan.num_tasks(); ++i) plan.Run(i);
          for (size_t e = 0; e < t.size(); ++e)
            ASSERT_EQ(t[e], alone[e]) << "plan, " << n << " rows, element " << e;
        }
      }
    }
  }
}

// Blocks wait for every pre task before their epilogue: on the pool, and inline (a region
// started while another holds the workers runs its tasks on the caller, in order) — a pre task
// left for a waiting block would hang there.
TEST(EpilogueRegion, BlocksSeeEveryPreTaskDoneOnThePoolAndInline) {
  auto run = [](int64_t pre_tasks, int64_t blocks) {
    std::vector<std::atomic<int>> pre_done(static_cast<size_t>(pre_tasks));
    for (auto& d : pre_done) d.store(0);
    std::atomic<int> epilogues_ok{0}, epilogues{0};
    MatmulEpilogue e;
    e.pre_tasks = pre_tasks;
    e.pre = [&](int64_t i) {
      volatile double sink = 0;  // some work, so a racing block would overtake it
      for (int k = 0; k < 20000; ++k) sink = sink + k;
      pre_done[static_cast<size_t>(i)].store(1);
    };
    e.block = [&](int64_t j0, int64_t j1) {
      bool all = true;
      for (auto& d : pre_done) all = all && d.load() == 1;
      epilogues_ok += all && j1 == j0 + 10;
      ++epilogues;
    };
    ParallelBlocks(blocks, &e, [](int64_t b) { return std::make_pair(b * 10, b * 10 + 10); });
    EXPECT_EQ(epilogues.load(), blocks);
    EXPECT_EQ(epilogues_ok.load(), blocks);
  };
  for (int64_t pre : {0, 1, 2, 7}) {
    for (int64_t blocks : {1, 2, 9}) run(pre, blocks);
  }
  // Nested: the outer region holds the workers, so the inner ones run inline.
  ThreadPool::Global().ParallelFor(3, [&](int64_t, int) { run(4, 3); });
}

}  // namespace
}  // namespace loom
