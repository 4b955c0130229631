// Row-wise ops; small next to the matmuls (O(rows·dim)), so plain loops the compiler vectorizes.
#include "ops/basic_ops.h"

#include <algorithm>
#include <cmath>

#include "base/thread_pool.h"
#include "cpu/activation_cpu.h"
#include "cpu/logits_scan_cpu.h"
#include "cpu/sample_cpu.h"
#include "ops/panel_blocks.h"

namespace loom {

namespace {
// fn(i0, i1) over [0, count) in ranges of whole 64-element units (ForEachRowRange over the
// units), over the pool from `min_count` elements: an element-wise vector kernel's scalar tail
// stays at the very end, so each element gets the same code and bits whatever the split.
template <typename Fn>
void ForEachElementRange(int64_t count, int64_t min_count, const Fn& fn) {
  constexpr int64_t kUnit = 64;
  ForEachRowRange((count + kUnit - 1) / kUnit,
                  [&](int64_t u0, int64_t u1) { fn(u0 * kUnit, std::min(count, u1 * kUnit)); },
                  min_count / kUnit);
}

// RmsNorm of rows [r0, r1).
void RmsNormRows(const float* x, int64_t r0, int64_t r1, int64_t d, const float* weight, double eps,
                 float* out) {
  for (int64_t r = r0; r < r1; ++r) {
    const float* xr = x + r * d;
    float* o = out + r * d;
    // Eight partial sums, then a fixed tree: each square is exact in double, so this sums the
    // same terms as one running sum and differs from it by a few units in the 53rd bit (nothing
    // after the f32 rounding below, in practice), but it is not one dependency chain of 896
    // double adds (that made RmsNorm ~4 % of a bf16 prefill, bench model, Emerald Rapids). The
    // order is fixed in the source, so every ISA level and row count gives the same bits.
    double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t i = 0;
    for (; i + 8 <= d; i += 8) {
      for (int l = 0; l < 8; ++l) acc[l] += static_cast<double>(xr[i + l]) * xr[i + l];
    }
    for (int l = 0; i < d; ++i, ++l) acc[l] += static_cast<double>(xr[i]) * xr[i];
    const double ss =
        ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]));
    // transformers: variance in f32, then x * rsqrt(variance + eps), then weight * x.
    const float variance = static_cast<float>(ss / static_cast<double>(d));
    const float inv = 1.0f / std::sqrt(variance + static_cast<float>(eps));
    for (int64_t i = 0; i < d; ++i) o[i] = weight[i] * (xr[i] * inv);
  }
}
}  // namespace

// The serial work between two matmuls keeps the other cores idle: on the 2-core Xeon (AMX), 32
// clients of `loom bench --closed-loop`, RmsNorm, SiLU and the AMX activation packing were ~6 %
// of the calling thread's time with the worker spinning. Rows ≥ 8 (a decode step of 8) go to
// the pool.
void RmsNorm(const float* x, int64_t n, int64_t d, const float* weight, double eps, float* out) {
  ForEachRowRange(
      n, [&](int64_t r0, int64_t r1) { RmsNormRows(x, r0, r1, d, weight, eps, out); }, 8);
}

void SiluMulInPlace(float* gate, const float* up, int64_t count) {
  const cpu::Isa isa = cpu::ActiveIsa();
  ForEachElementRange(count, 32768, [&](int64_t i0, int64_t i1) {
    cpu::SiluMul(isa, gate + i0, up + i0, i1 - i0);
  });
}

void GeluTanhMulInPlace(float* gate, const float* up, int64_t count) {
  const float beta = static_cast<float>(M_SQRT2 * M_2_SQRTPI * 0.5);
  const float kappa = 0.044715f;
  for (int64_t i = 0; i < count; ++i) {
    const float v = gate[i];
    const float inner = beta * (v + kappa * (v * v * v));
    gate[i] = 0.5f * v * (1.0f + std::tanh(inner)) * up[i];
  }
}

void GeluErfMulInPlace(float* gate, const float* up, int64_t count) {
  const float sqrt_half = static_cast<float>(M_SQRT1_2);
  for (int64_t i = 0; i < count; ++i) {
    const float v = gate[i];
    gate[i] = v * 0.5f * (1.0f + std::erf(v * sqrt_half)) * up[i];
  }
}

void SoftCapInPlace(float* x, int64_t count, float cap) {
  for (int64_t i = 0; i < count; ++i) x[i] = std::tanh(x[i] / cap) * cap;
}

void ScaleInPlace(float* x, int64_t count, float s) {
  for (int64_t i = 0; i < count; ++i) x[i] *= s;
}

void AddInPlace(float* x, const float* y, int64_t count) {
  ForEachElementRange(count, 65536, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) x[i] += y[i];
  });
}

void EmbedRows(const Tensor& table, const int32_t* ids, int64_t n, float* out) {
  const int64_t d = table.dim(1);
  const size_t row_bytes = static_cast<size_t>(d) * DTypeSize(table.dtype);
  for (int64_t r = 0; r < n; ++r) {
    const auto* src = static_cast<const uint8_t*>(table.data) + static_cast<size_t>(ids[r]) * row_bytes;
    ConvertToF32(table.dtype, src, out + r * d, d);
  }
}

void ToF32(const Tensor& t, float* out) { ConvertToF32(t.dtype, t.data, out, t.numel()); }

void ScanLogitsRow(const float* x, int64_t n, int64_t* best, int64_t* bad) {
  const cpu::LogitsScan scan = cpu::ScanLogits(cpu::ActiveIsa(), x, n);
  *best = scan.best;
  *bad = scan.bad;
}

double SumExpShifted(const float* x, int64_t n, float mx) {
  return cpu::SumExpShifted(cpu::ActiveIsa(), x, n, mx);
}

double ExpScaledRow(const float* x, int64_t n, float s, float mx, float* p) {
  return cpu::ExpScaled(cpu::ActiveIsa(), x, n, s, mx, p);
}

int64_t DrawByMassRow(const float* p, int64_t n, double u) {
  return cpu::DrawByMass(cpu::ActiveIsa(), p, n, u);
}

}  // namespace loom
