// Linear forward: base matmul, per-segment LoRA deltas (shrink then expand, f32), then bias.
#include "model/linear.h"

#include "lora/adapter.h"
#include "ops/matmul.h"

namespace loom {

namespace {
// Scratch for the LoRA intermediate and delta (engine thread only).
AlignedBuffer<float>& ShrinkScratch() {
  static AlignedBuffer<float> buf;
  return buf;
}
AlignedBuffer<float>& ExpandScratch() {
  static AlignedBuffer<float> buf;
  return buf;
}
}  // namespace

void Linear::Forward(const float* x, int64_t n, float* y, const LoraBatch& lora) const {
  Matmul(x, n, weight, y);
  const int64_t in = in_features();
  const int64_t out = out_features();
  if (lora.segments && lora.adapters) {
    for (const Segment& seg : *lora.segments) {
      if (seg.adapter_slot < 0) continue;
      const Adapter* adapter = (*lora.adapters)[static_cast<size_t>(seg.adapter_slot)];
      const LoraWeights* lw = adapter ? adapter->Find(site) : nullptr;
      if (!lw) continue;
      const int64_t rows = seg.num_rows;
      const float* xs = x + seg.first_row * in;
      float* ys = y + seg.first_row * out;
      AlignedBuffer<float>& t = ShrinkScratch();    // [rows, rank]
      AlignedBuffer<float>& d = ExpandScratch();    // [rows, out]
      t.Resize(static_cast<size_t>(rows * lw->rank));
      d.Resize(static_cast<size_t>(rows * out));
      Matmul(xs, rows, lw->a, t.data());
      Matmul(t.data(), rows, lw->b, d.data());
      const float s = lw->scale;
      const float* lb = lw->bias.empty() ? nullptr : lw->bias.data();
      const float* g = lw->dora_gain.empty() ? nullptr : lw->dora_gain.data();
      for (int64_t r = 0; r < rows; ++r) {
        float* yr = ys + r * out;
        const float* dr = d.data() + r * out;
        if (g) {  // Same as PEFT DoRA: y = g⊙(x·Wᵀ) + g⊙scale·(t·Bᵀ + b_B); base bias after.
          for (int64_t j = 0; j < out; ++j) yr[j] = g[j] * yr[j] + g[j] * s * (dr[j] + (lb ? lb[j] : 0.0f));
        } else if (lb) {
          for (int64_t j = 0; j < out; ++j) yr[j] += s * (dr[j] + lb[j]);
        } else {
          for (int64_t j = 0; j < out; ++j) yr[j] += s * dr[j];
        }
      }
    }
  }
  if (!bias.empty()) {
    for (int64_t r = 0; r < n; ++r) {
      float* yr = y + r * out;
      for (int64_t j = 0; j < out; ++j) yr[j] += bias[static_cast<size_t>(j)];
    }
  }
}

}  // namespace loom
