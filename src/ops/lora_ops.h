// LoRA shrink (all segments of a projection at once) and expand (over a column block): the ops model/ calls, dispatched to the CPU kernels of the active ISA.
#pragma once

#include <cstdint>
#include <vector>

#include "tensor/dtype.h"
#include "tensor/tensor.h"

namespace loom {

// One segment's shrink: t [rows, rank] = x [rows, in] · aᵀ, a [rank, in] (f32/f16/bf16).
struct LoraShrinkJob {
  const float* x;
  int64_t rows;
  const Tensor* a;
  float* t;
};

// The shrink of every job (all of one projection's segments), cut into tasks: bf16 A with `in`
// a multiple of 32 on AMX tiles of 16 rows where the CPU has them, else the f32 FMA kernel in
// tasks of 4 rows; a one-row job may also be cut by rank (Build's min_tasks), so a decode row's
// shrink runs on every core. The kernel depends only on the adapter and the projection, and
// each t[r, k] is summed on its own in one fixed order (never depending on the other rows,
// ranks or how they are grouped: batch invariance), so decode rows and prefill chunks get the
// same bits. Linear runs the tasks as the pre tasks of the base matmul's parallel region.
class LoraShrinkPlan {
 public:
  // Keeps `jobs` (which must outlive Run); min_tasks: cut one-row jobs by rank, in multiples of
  // 4, until there are at least this many tasks (or none can be cut further). amx: the
  // projection's base runs on AMX at every row count (a bf16 base in batch-invariant mode), so
  // the shrink may too; false (an int8/int4/NF4 base, whose decode rows run on VNNI) keeps it on
  // the FMA kernel at every row count: an AMX product after a few µs without one costs ~1 µs
  // more than back to back (the tile unit wakes up), which a lone decode row's shrink paid on
  // every projection.
  void Build(const LoraShrinkJob* jobs, size_t num_jobs, int64_t in, int min_tasks,
             bool amx = true);
  int64_t num_tasks() const { return static_cast<int64_t>(tasks_.size()); }
  // Runs task i (0 ≤ i < num_tasks()); tasks write disjoint parts of t.
  void Run(int64_t i) const;

 private:
  struct Task {
    uint32_t job;
    bool amx;
    int64_t r0, rows;
    int k0, k1;  // ranks [k0, k1) (a one-row job cut by rank), else the whole rank
  };
  std::vector<Task> tasks_;
  const LoraShrinkJob* jobs_ = nullptr;
  int64_t in_ = 0;
};

// d[r, j - j0] = Σ_k t[r, k] · B[j, k] for j in [j0, j1): t [rows, rank] f32, B [out, rank] of
// `dtype` (f32/f16/bf16) packed by PackLoraPanels, d [rows, j1 - j0] f32. The same summation order whatever `rows`
// (batch invariance).
void LoraExpandBlock(const float* t, int64_t rows, int rank, DType dtype, const void* b_panels,
                     int64_t out, int64_t j0, int64_t j1, float* d);

// y[r, j] += scale · Σ_k t[r, k] · B[j, k] for j in [j0, j1), r < rows; y's rows are `ldy`
// apart. The plain-LoRA path of the expand: no scratch, one pass.
void LoraExpandAddBlock(const float* t, int64_t rows, int rank, DType dtype, const void* b_panels,
                        int64_t out, int64_t j0, int64_t j1, float scale, float* y, int64_t ldy);

}  // namespace loom
