// Matmul op: splits output columns across the pool; picks the exact or bf16-dot kernel.
#include "ops/matmul.h"

#include <algorithm>

#include "base/check.h"
#include "base/mmap_file.h"
#include "base/thread_pool.h"
#include "cpu/amx_tiles.h"
#include "cpu/int8_cpu.h"
#include "cpu/matmul_cpu.h"
#include "ops/epilogue_region.h"
#include "ops/panel_blocks.h"

namespace loom {

MatmulOptions& GlobalMatmulOptions() {
  static MatmulOptions options;
  return options;
}

std::string MatmulKernelsDescription() {
  const cpu::Isa isa = cpu::ActiveIsa();
  std::string out = std::string("isa ") + cpu::IsaName(isa);
  if (isa == cpu::Isa::kAvx512Bf16 && GlobalMatmulOptions().bf16_split) {
    out += " (exact: bf16 weights widened to f32)";
  } else if (isa >= cpu::Isa::kAvx512Bf16) {
    out += GlobalMatmulOptions().bf16_split ? " (bf16 activations exact hi+lo)"
                                            : " (bf16 activations rounded once)";
  } else {
    out += " (bf16 weights widened to f32)";
  }
  const cpu::IntKernel ik = cpu::IntKernelFor(isa);
  out += std::string("; int8/int4 ") + cpu::IntKernelName(ik);
  // No AVX-VNNI kernel for int4 zero points (GPTQ/AWQ): those run the AVX2 one.
  if (ik == cpu::IntKernel::kAvxVnni) out += " (int4 zero points: avx2)";
  if (isa >= cpu::Isa::kAmx && cpu::HasAmxInt8()) out += " (int8, int4 g64/g128 prefill: amx)";
  return out;
}

namespace {

// What the AMX bf16 kernel takes: bf16 weights whose inputs are whole 32-wide tile steps, on a CPU
// running the amx level.
bool AmxShape(const Tensor& w) {
  return w.dtype == DType::kBF16 && cpu::ActiveIsa() == cpu::Isa::kAmx && w.dim(1) % 32 == 0;
}

bool UseBf16Dot(const Tensor& w, int64_t n) {
  const MatmulOptions& o = GlobalMatmulOptions();
  if (w.dtype != DType::kBF16 || cpu::ActiveIsa() < cpu::Isa::kAvx512Bf16) return false;
  // The exact path without AMX: f32 activations × widened weights (f32 FMA) are exact and, where
  // vdpbf16ps issues once per 2 cycles (Sapphire/Emerald Rapids), twice the hi+lo pair's speed
  // (bench model prefill at avx512bf16: ~150 tok/s vs ~70; docs/PERFORMANCE.md).
  if (o.bf16_split && cpu::ActiveIsa() == cpu::Isa::kAvx512Bf16) return false;
  if (o.batch_invariant) return true;  // one path for every row count
  return o.bf16_dot_min_rows > 0 && n >= o.bf16_dot_min_rows;
}

// Batch-invariant mode uses AMX for every row count too (a decode row is padded into a
// 16-row tile; each output still sums its own row's products in the same order), so the
// invariant path runs at AMX speed for prefill and at memory speed for decode.
bool UseAmx(const Tensor& w, int64_t n) { return UseBf16Dot(w, n) && AmxShape(w); }

// Activation rows rounded to bf16, reused across calls. Owned by the calling thread, taken
// before the parallel region: concurrent Matmul callers (two engines, a merge) never share it.
AlignedBuffer<uint16_t>& Bf16Scratch() {
  static thread_local AlignedBuffer<uint16_t> buf;
  return buf;
}
// Tasks an AMX matmul of n activation rows aims for: 4 a core for a prefill (balance), 1 for
// decode (each core streams one contiguous run of weight rows; see Matmul).
int64_t AmxTasksWanted(int64_t n) {
  return int64_t{ThreadPool::Global().num_threads()} * (n < cpu::kAmxTileRows ? 1 : 4);
}

// x [n, k] rounded to bf16 in AMX B tiles (and the residuals when split), in this thread's
// scratch: valid until its next use.
const uint16_t* PackActivationsForAmx(const float* x, int64_t n, int64_t k, bool split) {
  auto& buf = Bf16Scratch();
  LOOM_CHECK_OK(buf.Resize(cpu::PackedActivationsAmxSize(n, k, split)));
  // Groups of 16 rows packed over the pool once there are several (serial, it kept the other
  // core idle for ~2 % of a 32-client serving run).
  ForEachRowRange((n + cpu::kAmxTileRows - 1) / cpu::kAmxTileRows,
                  [&](int64_t g0, int64_t g1) {
                    cpu::PackActivationsAmxGroups(x, n, k, split, buf.data(), g0, g1);
                  },
                  2);
  return buf.data();
}
}  // namespace

void MatmulColumns(const float* x, int64_t n, const Tensor& w, int64_t j0, int64_t j1, float* y,
                   int64_t ldy) {
  const int64_t k = w.dim(1);
  const auto* rows = static_cast<const uint8_t*>(w.data) + static_cast<size_t>(j0 * k) * DTypeSize(w.dtype);
  cpu::MatmulF32(cpu::ActiveIsa(), w.dtype, x, n, k, rows, 0, j1 - j0, y, ldy);
}

bool AmxPackable(const Tensor& w) { return w.rank() == 2 && w.data != nullptr && AmxShape(w); }

StatusOr<std::unique_ptr<AmxPackedWeight>> PackWeightForAmx(const Tensor& w,
                                                            const std::string& name,
                                                            bool release_source) {
  LOOM_CHECK(AmxPackable(w));
  auto p = std::make_unique<AmxPackedWeight>();
  p->rows = w.dim(0);
  p->cols = w.dim(1);
  if (Status st = p->panels.Resize(cpu::AmxPackedWeightSize(p->rows, p->cols)); !st.ok()) {
    return ResourceExhausted("packing " + name + " for AMX: " + st.message());
  }
  const int64_t panels = (p->rows + cpu::kAmxTileRows - 1) / cpu::kAmxTileRows;
  const auto* wd = static_cast<const uint16_t*>(w.data);
  // ~32 MiB of the source at a time, its file pages let go once packed (release_source), so a
  // large lm_head is never resident twice.
  const int64_t panel_bytes = cpu::kAmxTileRows * p->cols * 2;
  const int64_t chunk = std::max<int64_t>(1, (int64_t{32} << 20) / panel_bytes);
  for (int64_t c0 = 0; c0 < panels; c0 += chunk) {
    const int64_t c1 = std::min(panels, c0 + chunk);
    ForEachRowRange(
        c1 - c0,
        [&](int64_t p0, int64_t p1) {
          cpu::PackWeightAmx(wd, p->rows, p->cols, c0 + p0, c0 + p1, p->panels.data());
        },
        2);
    if (release_source) {
      const int64_t r0 = c0 * cpu::kAmxTileRows, r1 = std::min(p->rows, c1 * cpu::kAmxTileRows);
      ReleaseMappedPages(wd + r0 * p->cols, static_cast<size_t>((r1 - r0) * p->cols) * 2);
    }
  }
  return p;
}

void Matmul(const float* x, int64_t n, const Tensor& w, float* y, const MatmulEpilogue* epilogue,
            const AmxPackedWeight* amx) {
  LOOM_CHECK(w.rank() == 2);
  const int64_t m = w.dim(0);
  const int64_t k = w.dim(1);
  if (n == 0 || m == 0) return;
  ThreadPool& pool = ThreadPool::Global();
  const bool bf16_dot = UseBf16Dot(w, n);
  const bool split = GlobalMatmulOptions().bf16_split;
  if (UseAmx(w, n)) {
    const uint16_t* xp = PackActivationsForAmx(x, n, k, split);
    // 32 weight rows per tile pair. Prefill: 4 blocks per core to balance them. Decode (fewer
    // rows than a tile): one block per core, so each core streams one contiguous run of weight
    // rows: bf16 decode, 0.5B shape, 2 threads, Emerald Rapids, 4 → 1 block per core
    // interleaved twice (with Block's next-block prefetch of then): batch 1 21.6-21.7 →
    // 24.4-24.5 tok/s, batch 4 82-83 → 90-91, batch 8 155-158 → 173-174; without that prefetch
    // (2026-12-05, 3 runs) 1 still leads 4: batch 8 182-190 vs 176-182. The avx512bf16 and
    // avx2 kernels below showed no such difference (8 → 1 per core).
    // The 32-row units spread evenly over the tasks (sizes differ by at most one unit): 896
    // rows as 128-row blocks were 7 tasks, 4 on one core and 3 on the other (q_proj, o_proj and
    // down_proj of the 0.5B shape at ~0.9–1.2 TFLOP/s in a prefill against 1.5 for gate/up).
    const int64_t units = (m + 31) / 32;
    const int64_t num_tasks = std::max<int64_t>(1, std::min<int64_t>(AmxTasksWanted(n), units));
    const auto* wd = static_cast<const uint16_t*>(w.data);
    LOOM_CHECK(amx == nullptr || (amx->rows == m && amx->cols == k));
    ParallelBlocks(num_tasks, epilogue, [&](int64_t task) {
      const int64_t j0 = task * units / num_tasks * 32;  // a multiple of 32
      const int64_t j1 = std::min(m, (task + 1) * units / num_tasks * 32);
      if (amx) {
        cpu::MatmulBf16AmxPacked(xp, split, n, k, amx->panels.data(), j0, j1, y, m);
      } else {
        cpu::MatmulBf16Amx(xp, split, n, k, wd, j0, j1, y, m);
      }
      return std::make_pair(j0, j1);
    });
    return;
  }
  const uint16_t* xb = nullptr;
  const uint16_t* x_lo = nullptr;
  if (bf16_dot) {
    auto& buf = Bf16Scratch();
    LOOM_CHECK_OK(buf.Resize(static_cast<size_t>(n * k) * (split ? 2 : 1)));
    uint16_t* hi = buf.data();
    if (split) x_lo = hi + n * k;
    cpu::RoundToBf16(cpu::ActiveIsa(), x, n * k, hi, split ? hi + n * k : nullptr);
    xb = hi;
  }
  if (n * m * k < (int64_t{1} << 16)) {  // too small to repay waking the workers
    SerialBlocks(1, epilogue, [&](int64_t) {
      if (bf16_dot) {
        cpu::MatmulBf16(cpu::ActiveIsa(), xb, x_lo, n, k, static_cast<const uint16_t*>(w.data), 0,
                        m, y, m);
      } else {
        cpu::MatmulF32(cpu::ActiveIsa(), w.dtype, x, n, k, w.data, 0, m, y, m);
      }
      return std::make_pair(int64_t{0}, m);
    });
    return;
  }
  // Column blocks: a multiple of 4 (the kernels' tile), enough tasks to balance the cores.
  const int64_t target_tasks = static_cast<int64_t>(pool.num_threads()) * 8;
  int64_t block = std::max<int64_t>(16, (m + target_tasks - 1) / target_tasks);
  block = (block + 15) / 16 * 16;
  const int64_t num_tasks = (m + block - 1) / block;
  const cpu::Isa isa = cpu::ActiveIsa();
  ParallelBlocks(num_tasks, epilogue, [&](int64_t task) {
    const int64_t j0 = task * block;
    const int64_t j1 = std::min(m, j0 + block);
    if (bf16_dot) {
      cpu::MatmulBf16(isa, xb, x_lo, n, k, static_cast<const uint16_t*>(w.data), j0, j1, y, m);
    } else {
      cpu::MatmulF32(isa, w.dtype, x, n, k, w.data, j0, j1, y, m);
    }
    return std::make_pair(j0, j1);
  });
}

bool SiluMulFusable(const Tensor& gate, const AmxPackedWeight* gate_amx, const Tensor& up,
                    const AmxPackedWeight* up_amx, int64_t n) {
  return gate_amx && up_amx && gate.rank() == 2 && up.rank() == 2 && gate.dim(0) == up.dim(0) &&
         gate.dim(1) == up.dim(1) && gate.dim(0) % cpu::kAmxTileRows == 0 &&
         gate_amx->rows == gate.dim(0) && gate_amx->cols == gate.dim(1) &&
         up_amx->rows == up.dim(0) && up_amx->cols == up.dim(1) && UseAmx(gate, n) && UseAmx(up, n);
}

void MatmulSiluMul(const float* x, int64_t n, const AmxPackedWeight& gate,
                   const AmxPackedWeight& up, float* y) {
  const int64_t m = gate.rows, k = gate.cols;
  if (n == 0 || m == 0) return;
  const bool split = GlobalMatmulOptions().bf16_split;
  const uint16_t* xp = PackActivationsForAmx(x, n, k, split);
  // 16-row units (a gate and an up tile each) spread evenly, as Matmul spreads its 32-row ones.
  const int64_t units = m / cpu::kAmxTileRows;
  const int64_t num_tasks = std::max<int64_t>(1, std::min<int64_t>(AmxTasksWanted(n), units));
  ParallelBlocks(num_tasks, nullptr, [&](int64_t task) {
    const int64_t j0 = task * units / num_tasks * cpu::kAmxTileRows;
    const int64_t j1 = (task + 1) * units / num_tasks * cpu::kAmxTileRows;
    cpu::MatmulBf16AmxPackedSiluMul(xp, split, n, k, gate.panels.data(), up.panels.data(), j0, j1,
                                    y, m);
    return std::make_pair(j0, j1);
  });
}

bool MatmulSharedFusable(const std::vector<MatmulPart>& parts, int64_t n) {
  if (parts.empty()) return false;
  for (const MatmulPart& p : parts) {
    if (!p.w || !p.amx || !p.y || p.w->rank() != 2 || p.w->dim(0) <= 0 ||
        p.w->dim(1) != parts[0].w->dim(1) || p.amx->rows != p.w->dim(0) ||
        p.amx->cols != p.w->dim(1) || !UseAmx(*p.w, n)) {
      return false;
    }
  }
  return true;
}

void MatmulShared(const float* x, int64_t n, const std::vector<MatmulPart>& parts) {
  const int64_t k = parts[0].w->dim(1);
  if (n == 0) return;
  const bool split = GlobalMatmulOptions().bf16_split;
  const uint16_t* xp = PackActivationsForAmx(x, n, k, split);
  // Each part's 32-row units spread evenly over its share of the tasks (its share of all units).
  int64_t total_units = 0;
  for (const MatmulPart& p : parts) total_units += (p.w->dim(0) + 31) / 32;
  const int64_t want = AmxTasksWanted(n);
  struct Task {
    const MatmulPart* part;
    int64_t j0, j1;
  };
  std::vector<Task> tasks;
  for (const MatmulPart& p : parts) {
    const int64_t m = p.w->dim(0), units = (m + 31) / 32;
    const int64_t t = std::clamp<int64_t>((want * units + total_units / 2) / total_units, 1, units);
    for (int64_t i = 0; i < t; ++i) {
      tasks.push_back({&p, i * units / t * 32, std::min(m, (i + 1) * units / t * 32)});
    }
  }
  ThreadPool::Global().ParallelFor(static_cast<int64_t>(tasks.size()), [&](int64_t i, int) {
    const Task& t = tasks[static_cast<size_t>(i)];
    const int64_t m = t.part->w->dim(0);
    cpu::MatmulBf16AmxPacked(xp, split, n, k, t.part->amx->panels.data(), t.j0, t.j1, t.part->y, m);
    if (const float* b = t.part->bias) {  // as Linear's epilogue adds it: after the block
      for (int64_t r = 0; r < n; ++r) {
        float* yr = t.part->y + r * m;
        for (int64_t j = t.j0; j < t.j1; ++j) yr[j] += b[j];
      }
    }
  });
}

}  // namespace loom
