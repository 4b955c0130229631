// Linear forward: base matmul, per-segment LoRA deltas (shrink then expand, f32), then bias.
#include "model/linear.h"

#include "base/check.h"
#include "base/thread_pool.h"
#include "lora/adapter.h"
#include "ops/lora_ops.h"
#include "ops/matmul.h"
#include "tensor/lora_panels.h"

namespace loom {

namespace {
// LoRA intermediates t = x·Aᵀ per active segment. Owned by the calling thread (the engine's),
// taken before the parallel region and shared with the workers by reference: two engines on
// two threads never share it.
AlignedBuffer<float>& ShrinkScratch() {
  static thread_local AlignedBuffer<float> buf;
  return buf;
}
LoraShrinkPlan& ShrinkPlan() {
  static thread_local LoraShrinkPlan plan;
  return plan;
}
}  // namespace

void Linear::Forward(const float* x, int64_t n, float* y, const LoraBatch& lora) const {
  const int64_t in = in_features();
  const int64_t out = out_features();
  // Segments whose adapter adapts this projection, and their shrink results.
  struct Active {
    const Segment* seg;
    const LoraWeights* lw;
    size_t t_offset;  // into ShrinkScratch: [seg rows, rank]
  };
  Active active[16];
  std::vector<Active> many;
  Active* act = active;
  size_t num_active = 0, t_size = 0;
  if (lora.segments && lora.adapters) {
    for (const Segment& seg : *lora.segments) {
      const LoraWeights* lw = SegmentLora(lora, seg);
      if (!lw) continue;
      const Active a{&seg, lw, t_size};
      if (num_active < 16) {
        active[num_active] = a;
      } else {
        if (many.empty()) many.assign(active, active + 16);
        many.push_back(a);
      }
      ++num_active;
      t_size += static_cast<size_t>(seg.num_rows * lw->rank);
    }
  }
  if (num_active > 16) act = many.data();
  auto base_matmul = [&](const MatmulEpilogue* epilogue) {
    if (int8) {
      MatmulInt8(x, n, *int8, y, epilogue);
    } else if (int4) {
      MatmulInt4(x, n, *int4, y, epilogue);
    } else if (nf4) {
      MatmulNf4(x, n, *nf4, y, epilogue);
    } else {
      Matmul(x, n, weight, y, epilogue, amx.get());
    }
  };
  if (num_active == 0 && bias.empty()) {
    base_matmul(nullptr);  // a projection no segment adapts costs nothing extra
    return;
  }
  // Shrink: t = x[rows]·Aᵀ for every segment, as the first tasks of the base matmul's parallel
  // region (a decode row's shrink cut by rank over the workers); each block's expand waits for
  // them. A separate region cost a fork-join per projection, and a lone decode row's shrink ran
  // on one core while the other waited.
  AlignedBuffer<float>& t = ShrinkScratch();
  LOOM_CHECK_OK(t.Resize(t_size));
  LoraShrinkJob jobs_small[16];
  std::vector<LoraShrinkJob> jobs_many;
  LoraShrinkJob* jobs = jobs_small;
  if (num_active > 16) {
    jobs_many.resize(num_active);
    jobs = jobs_many.data();
  }
  for (size_t i = 0; i < num_active; ++i) {
    const Segment& seg = *act[i].seg;
    jobs[i] = {x + seg.first_row * in, seg.num_rows, &act[i].lw->a, t.data() + act[i].t_offset};
  }
  LoraShrinkPlan& plan = ShrinkPlan();
  // The shrink on AMX only where the base runs there at every row count (LoraShrinkPlan::Build).
  plan.Build(jobs, num_active, in, ThreadPool::Global().num_threads(), !(int8 || int4 || nf4));
  // Expand, DoRA and bias per column block, inside the base matmul's parallel region.
  const bool batch_invariant = GlobalMatmulOptions().batch_invariant;
  MatmulEpilogue epilogue;
  epilogue.pre_tasks = plan.num_tasks();
  // Whether segment i's expand is the plain LoRA one straight into y, which reads B's panels.
  auto plain_panels = [&](size_t i) {
    const LoraWeights& lw = *act[i].lw;
    return lw.bias.empty() && lw.dora_gain.empty() && (act[i].seg->num_rows >= 4 || batch_invariant);
  };
  // Those B panels for the block, prefetched while the base kernel computes it.
  epilogue.prefetch = [&](int64_t j0, int64_t j1, cpu::SidePrefetch* side) {
    for (size_t i = 0; i < num_active; ++i) {
      if (!plain_panels(i)) continue;
      const LoraWeights& lw = *act[i].lw;
      const int64_t esize = static_cast<int64_t>(DTypeSize(lw.b_panels.dtype));
      const LoraPanelRange r = LoraPanelsOf(lw.rank, j0, j1);
      side->Add(static_cast<const char*>(lw.b_panels.data) + r.first * esize, r.count * esize);
    }
  };
  if (epilogue.pre_tasks > 0) epilogue.pre = [&](int64_t task) { plan.Run(task); };
  epilogue.block = [&](int64_t j0, int64_t j1) {
    static thread_local AlignedBuffer<float> d;  // [rows, j1 - j0]
    const int64_t width = j1 - j0;
    for (size_t i = 0; i < num_active; ++i) {
      const Segment& seg = *act[i].seg;
      const LoraWeights& lw = *act[i].lw;
      if (plain_panels(i)) {
        // plain LoRA: y += scale·(t·Bᵀ) straight into y's rows
        LoraExpandAddBlock(t.data() + act[i].t_offset, seg.num_rows, lw.rank, lw.b_panels.dtype,
                           lw.b_panels.data, out, j0, j1, lw.scale, y + seg.first_row * out, out);
        continue;
      }
      LOOM_CHECK_OK(d.Resize(static_cast<size_t>(seg.num_rows * width)));
      if (seg.num_rows >= 4 || batch_invariant) {
        // compute-bound: broadcast-FMA over Bᵀ, no reductions; the same summation order for
        // every row count (batch invariance)
        LoraExpandBlock(t.data() + act[i].t_offset, seg.num_rows, lw.rank, lw.b_panels.dtype,
                        lw.b_panels.data, out, j0, j1, d.data());
      } else {  // memory-bound decode: B's rows for the block are one contiguous stream
        MatmulColumns(t.data() + act[i].t_offset, seg.num_rows, lw.b, j0, j1, d.data(), width);
      }
      const float s = lw.scale;
      const float* lb = lw.bias.empty() ? nullptr : lw.bias.data() + j0;
      const float* g = lw.dora_gain.empty() ? nullptr : lw.dora_gain.data() + j0;
      for (int64_t r = 0; r < seg.num_rows; ++r) {
        float* yr = y + (seg.first_row + r) * out + j0;
        const float* dr = d.data() + r * width;
        if (g) {  // Same as PEFT DoRA: y = g⊙(x·Wᵀ) + g⊙scale·(t·Bᵀ + b_B); base bias after.
          for (int64_t j = 0; j < width; ++j) yr[j] = g[j] * yr[j] + g[j] * s * (dr[j] + (lb ? lb[j] : 0.0f));
        } else if (lb) {
          for (int64_t j = 0; j < width; ++j) yr[j] += s * (dr[j] + lb[j]);
        } else {
          for (int64_t j = 0; j < width; ++j) yr[j] += s * dr[j];
        }
      }
    }
    if (!bias.empty()) {
      for (int64_t r = 0; r < n; ++r) {
        float* yr = y + r * out;
        for (int64_t j = j0; j < j1; ++j) yr[j] += bias[static_cast<size_t>(j)];
      }
    }
  };
  base_matmul(&epilogue);
}

const LoraWeights* Linear::SegmentLora(const LoraBatch& lora, const Segment& seg) const {
  if (seg.adapter_slot < 0) return nullptr;
  const Adapter* adapter = (*lora.adapters)[static_cast<size_t>(seg.adapter_slot)];
  return adapter ? adapter->Find(site) : nullptr;
}

bool Linear::Adapted(const LoraBatch& lora) const {
  if (!lora.segments || !lora.adapters) return false;
  for (const Segment& seg : *lora.segments) {
    if (SegmentLora(lora, seg)) return true;
  }
  return false;
}

bool ForwardSiluMul(const Linear& gate, const Linear& up, const float* x, int64_t n, float* y,
                    const LoraBatch& lora) {
  if (!gate.bias.empty() || !up.bias.empty() || gate.int8 || gate.int4 || gate.nf4 || up.int8 ||
      up.int4 || up.nf4) {
    return false;
  }
  if (!SiluMulFusable(gate.weight, gate.amx.get(), up.weight, up.amx.get(), n)) return false;
  if (gate.Adapted(lora) || up.Adapted(lora)) return false;
  MatmulSiluMul(x, n, *gate.amx, *up.amx, y);
  return true;
}

bool ForwardShared(const std::vector<std::pair<const Linear*, float*>>& parts, const float* x,
                   int64_t n, const LoraBatch& lora) {
  std::vector<MatmulPart> mp;
  for (const auto& [l, y] : parts) {
    if (l->int8 || l->int4 || l->nf4 || !l->amx || l->Adapted(lora)) return false;
    mp.push_back({&l->weight, l->amx.get(), l->bias.empty() ? nullptr : l->bias.data(), y});
  }
  if (!MatmulSharedFusable(mp, n)) return false;
  MatmulShared(x, n, mp);
  return true;
}

}  // namespace loom
