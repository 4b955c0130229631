// LoRA ops: the shrink of every segment cut into tasks (a matmul region's pre tasks), and the expand of a column block, at the active ISA level.
#include "ops/lora_ops.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "base/check.h"
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

void LoraShrinkPlan::Build(const LoraShrinkJob* jobs, size_t num_jobs, int64_t in, int min_tasks,
                           bool amx_base) {
  constexpr int64_t kFmaRows = 4;   // rows per task on the FMA kernel: its register block
  constexpr int64_t kAmxRows = 16;  // rows per task on AMX: one tile
  constexpr int kRankStep = 4;      // a rank cut keeps the FMA kernel's 4-rank tiles whole
  jobs_ = jobs;
  in_ = in;
  tasks_.clear();
  for (size_t j = 0; j < num_jobs; ++j) {
    const bool amx = amx_base && ShrinkOnAmx(*jobs[j].a, in);
    const int64_t step = amx ? kAmxRows : kFmaRows;
    const int rank = static_cast<int>(jobs[j].a->dim(0));
    for (int64_t r = 0; r < jobs[j].rows; r += step) {
      tasks_.push_back({static_cast<uint32_t>(j), amx, r, std::min(step, jobs[j].rows - r), 0, rank});
    }
  }
  // Cut one-row tasks by rank (largest first) while there are fewer tasks than wanted: a lone
  // decode row's shrink then streams A on every core instead of one (the AMX row kernel runs a
  // cut as tiles of fewer rows, same bits). 0.5B shape, int4 + head, one adapter at batch 1:
  // see docs/QUANTIZATION.md.
  while (num_tasks() < min_tasks) {
    size_t widest = tasks_.size();
    for (size_t i = 0; i < tasks_.size(); ++i) {
      const Task& t = tasks_[i];
      if (t.rows != 1 || t.k1 - t.k0 < 2 * kRankStep) continue;
      if (widest == tasks_.size() || t.k1 - t.k0 > tasks_[widest].k1 - tasks_[widest].k0) widest = i;
    }
    if (widest == tasks_.size()) break;
    Task& t = tasks_[widest];
    const int mid = t.k0 + ((t.k1 - t.k0) / 2 + kRankStep - 1) / kRankStep * kRankStep;
    Task upper = t;
    upper.k0 = mid;
    t.k1 = mid;
    tasks_.push_back(upper);
  }
}

void LoraShrinkPlan::Run(int64_t i) const {
  const Task& task = tasks_[static_cast<size_t>(i)];
  const LoraShrinkJob& job = jobs_[task.job];
  const int rank = static_cast<int>(job.a->dim(0));
  const float* x = job.x + task.r0 * in_;
  float* t = job.t + task.r0 * rank;
  if (task.amx && task.rows == 1) {  // decode: no 16-row group to pack; ranks [k0, k1)
    cpu::MatmulBf16AmxRow(x, GlobalMatmulOptions().bf16_split, in_,
                          static_cast<const uint16_t*>(job.a->data), task.k0, task.k1, t);
  } else if (task.amx) {
    const bool split = GlobalMatmulOptions().bf16_split;
    static thread_local AlignedBuffer<uint16_t> packed;  // this thread's 16 rows as bf16 tiles
    LOOM_CHECK_OK(packed.Resize(cpu::PackedActivationsAmxSize(task.rows, in_, split)));
    cpu::PackActivationsAmx(x, task.rows, in_, split, packed.data());
    cpu::MatmulBf16Amx(packed.data(), split, task.rows, in_,
                       static_cast<const uint16_t*>(job.a->data), 0, rank, t, rank);
  } else {  // ranks [k0, k1): all of them, or a one-row task's cut (t's row is contiguous)
    const size_t offset = static_cast<size_t>(task.k0 * in_) * DTypeSize(job.a->dtype);
    cpu::LoraShrink(cpu::ActiveIsa(), x, task.rows, in_, job.a->dtype,
                    static_cast<const uint8_t*>(job.a->data) + offset, task.k1 - task.k0, t + task.k0);
  }
}

void LoraExpandBlock(const float* t, int64_t rows, int rank, DType dtype, const void* b_panels,
                     int64_t out, int64_t j0, int64_t j1, float* d) {
  cpu::LoraExpand(cpu::ActiveIsa(), t, rows, rank, dtype, b_panels, out, j0, j1, d);
}

void LoraExpandAddBlock(const float* t, int64_t rows, int rank, DType dtype, const void* b_panels,
                        int64_t out, int64_t j0, int64_t j1, float scale, float* y, int64_t ldy) {
  cpu::LoraExpandAdd(cpu::ActiveIsa(), t, rows, rank, dtype, b_panels, out, j0, j1, scale, y, ldy);
}

}  // namespace loom
