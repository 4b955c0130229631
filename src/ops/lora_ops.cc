// LoRA ops: the shrink of every segment in one parallel region, and the expand of a column block, at the active ISA level.
#include "ops/lora_ops.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "base/check.h"
#include "base/thread_pool.h"
#include "cpu/cpu_features.h"
#include "cpu/lora_cpu.h"
#include "cpu/matmul_cpu.h"
#include "ops/matmul.h"

namespace loom {

namespace {
// AMX tiles for the shrink where the base matmuls use them for every row count (batch-invariant
// mode: bf16 A, `in` a multiple of 32; activations rounded to bf16 as for a bf16 base weight,
// or split hi + lo with --exact-bf16). The choice depends on the adapter and the projection only,
// never on the rows, so it keeps batch invariance. Otherwise the f32 FMA kernel (exact products).
bool ShrinkOnAmx(const Tensor& a, int64_t in) {
  return GlobalMatmulOptions().batch_invariant && cpu::ActiveIsa() == cpu::Isa::kAmx &&
         a.dtype == DType::kBF16 && in % 32 == 0;
}
}  // namespace

void LoraShrinkBatch(const LoraShrinkJob* jobs, size_t num_jobs, int64_t in) {
  constexpr int64_t kFmaRows = 4;   // rows per task on the FMA kernel: its register block
  constexpr int64_t kAmxRows = 16;  // rows per task on AMX: one tile
  // (job, first row, rows) per task, reused by the calling thread (the engine's). Workers see
  // the caller's list through this reference (a thread_local named in the lambda would be each
  // worker's own, empty, one).
  struct Task {
    uint32_t job;
    bool amx;
    int64_t r0, rows;
  };
  static thread_local std::vector<Task> caller_tasks;
  std::vector<Task>& tasks = caller_tasks;
  tasks.clear();
  int64_t macs = 0;
  for (size_t j = 0; j < num_jobs; ++j) {
    const bool amx = ShrinkOnAmx(*jobs[j].a, in);
    const int64_t step = amx ? kAmxRows : kFmaRows;
    for (int64_t r = 0; r < jobs[j].rows; r += step) {
      tasks.push_back({static_cast<uint32_t>(j), amx, r, std::min(step, jobs[j].rows - r)});
    }
    macs += jobs[j].rows * jobs[j].a->dim(0) * in;
  }
  const cpu::Isa isa = cpu::ActiveIsa();
  const bool split = GlobalMatmulOptions().bf16_split;
  auto run = [&](int64_t i, int) {
    const Task& task = tasks[static_cast<size_t>(i)];
    const LoraShrinkJob& job = jobs[task.job];
    const int rank = static_cast<int>(job.a->dim(0));
    const float* x = job.x + task.r0 * in;
    float* t = job.t + task.r0 * rank;
    if (task.amx && task.rows == 1) {  // decode: no 16-row group to pack
      cpu::MatmulBf16AmxRow(x, split, in, static_cast<const uint16_t*>(job.a->data), 0, rank, t);
    } else if (task.amx) {
      static thread_local AlignedBuffer<uint16_t> packed;  // this thread's 16 rows as bf16 tiles
      LOOM_CHECK_OK(packed.Resize(cpu::PackedActivationsAmxSize(task.rows, in, split)));
      cpu::PackActivationsAmx(x, task.rows, in, split, packed.data());
      cpu::MatmulBf16Amx(packed.data(), split, task.rows, in,
                         static_cast<const uint16_t*>(job.a->data), 0, rank, t, rank);
    } else {
      cpu::LoraShrink(isa, x, task.rows, in, job.a->dtype, job.a->data, rank, t);
    }
  };
  const auto num_tasks = static_cast<int64_t>(tasks.size());
  if (macs < (int64_t{1} << 16) || num_tasks == 1) {  // too small to repay waking the workers
    for (int64_t i = 0; i < num_tasks; ++i) run(i, 0);
    return;
  }
  ThreadPool::Global().ParallelFor(num_tasks, run);
}

void LoraExpandBlock(const float* t, int64_t rows, int rank, DType dtype, const void* b_t,
                     int64_t out, int64_t j0, int64_t j1, float* d) {
  cpu::LoraExpand(cpu::ActiveIsa(), t, rows, rank, dtype, b_t, out, j0, j1, d);
}

void LoraExpandAddBlock(const float* t, int64_t rows, int rank, DType dtype, const void* b_t,
                        int64_t out, int64_t j0, int64_t j1, float scale, float* y, int64_t ldy) {
  cpu::LoraExpandAdd(cpu::ActiveIsa(), t, rows, rank, dtype, b_t, out, j0, j1, scale, y, ldy);
}

}  // namespace loom
