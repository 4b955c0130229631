// Google Benchmark of the quantized matmul ops (int8 W8A8, int4 W4A8 groups 32/128, int4 with GPTQ/AWQ zero points, bitsandbytes NF4) on Qwen2.5-0.5B shapes, with weight bytes/s against the memory roofline.
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "ops/matmul_int4.h"
#include "ops/matmul_int8.h"
#include "ops/matmul_nf4.h"
#include "tensor/dtype.h"

namespace {

// n × k activations from N(0, 1).
std::vector<float> Activations(int64_t n, int64_t k, std::mt19937* rng) {
  std::normal_distribution<float> dist(0, 1);
  std::vector<float> x(static_cast<size_t>(n * k));
  for (auto& v : x) v = dist(*rng);
  return x;
}

// GFLOP/s of an n × m × k matmul and the weight bytes streamed per second.
void Report(benchmark::State& state, int64_t n, int64_t m, int64_t k, uint64_t weight_bytes) {
  state.counters["GFLOPs"] = benchmark::Counter(2.0 * n * m * k, benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
  state.counters["GB/s(W)"] = benchmark::Counter(static_cast<double>(weight_bytes), benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
}

// Args: rows n, out m, in k, scheme (0 = int8, 32 / 128 = int4 with that group).
void BM_Quant(benchmark::State& state) {
  const int64_t n = state.range(0), m = state.range(1), k = state.range(2);
  const int scheme = static_cast<int>(state.range(3));
  std::mt19937 rng(1);
  std::normal_distribution<float> dist(0, 1);
  const std::vector<float> x = Activations(n, k, &rng);
  std::vector<float> w(static_cast<size_t>(m * k));
  for (auto& v : w) v = dist(rng) * 0.05f;
  std::vector<float> y(static_cast<size_t>(n * m));
  loom::Tensor wt{loom::DType::kF32, {m, k}, w.data()};
  std::unique_ptr<loom::Int8Weight> w8;
  std::unique_ptr<loom::Int4Weight> w4;
  uint64_t bytes = 0;
  if (scheme == 0) {
    w8 = std::move(loom::QuantizeWeightInt8(wt, "w")).value();
    bytes = w8->bytes();
  } else {
    w4 = std::move(loom::QuantizeWeightInt4(wt, "w", scheme)).value();
    bytes = w4->bytes();
  }
  for (auto _ : state) {
    if (w8) loom::MatmulInt8(x.data(), n, *w8, y.data());
    if (w4) loom::MatmulInt4(x.data(), n, *w4, y.data());
    benchmark::DoNotOptimize(y.data());
  }
  Report(state, n, m, k, bytes);
}

// Asymmetric int4 (GPTQ / AWQ: stored nibbles u, per-group zero points z): args rows n, out m,
// in k, group.
void BM_QuantZp(benchmark::State& state) {
  const int64_t n = state.range(0), m = state.range(1), k = state.range(2);
  const int group = static_cast<int>(state.range(3));
  std::mt19937 rng(2);
  const std::vector<float> x = Activations(n, k, &rng);
  std::vector<float> y(static_cast<size_t>(n * m));
  std::vector<uint8_t> u(static_cast<size_t>(m * k)), z(static_cast<size_t>(m * (k / group)));
  std::vector<uint16_t> d(z.size());
  for (auto& v : u) v = static_cast<uint8_t>(rng() % 16);
  for (auto& v : z) v = static_cast<uint8_t>(rng() % 17);
  for (auto& v : d) v = loom::F32ToF16(0.01f + 0.001f * static_cast<float>(rng() % 10));
  auto w = std::move(loom::Int4WeightAsymmetric(u.data(), d.data(), z.data(), {}, m, k, group, "w")).value();
  for (auto _ : state) {
    loom::MatmulInt4(x.data(), n, *w, y.data());
    benchmark::DoNotOptimize(y.data());
  }
  Report(state, n, m, k, w->bytes());
}

// bitsandbytes NF4 (the QLoRA base: f32 activations, 16-entry code book, f32 absmax per block):
// args rows n, out m, in k, block.
void BM_Nf4(benchmark::State& state) {
  const int64_t n = state.range(0), m = state.range(1), k = state.range(2), block = state.range(3);
  std::mt19937 rng(3);
  const std::vector<float> x = Activations(n, k, &rng);
  std::vector<float> y(static_cast<size_t>(n * m));
  std::vector<uint8_t> q(static_cast<size_t>(m * k));
  std::vector<float> absmax(static_cast<size_t>(m * (k / block)));
  for (auto& v : q) v = static_cast<uint8_t>(rng() % 16);
  for (auto& v : absmax) v = 0.01f + 0.001f * static_cast<float>(rng() % 10);
  auto w = std::move(loom::Nf4WeightFromRows(q.data(), absmax.data(), m, k, block, "w")).value();
  for (auto _ : state) {
    loom::MatmulNf4(x.data(), n, *w, y.data());
    benchmark::DoNotOptimize(y.data());
  }
  Report(state, n, m, k, w->bytes());
}

BENCHMARK(BM_Nf4)
    ->ArgsProduct({{1, 2, 4, 8, 16, 128}, {4864}, {896}, {64}})
    ->ArgsProduct({{128}, {896}, {4864}, {64}})
    ->UseRealTime();

BENCHMARK(BM_QuantZp)->ArgsProduct({{1, 8, 128}, {4864}, {896}, {128}})->UseRealTime();

BENCHMARK(BM_Quant)
    ->ArgsProduct({{1, 8, 128}, {4864}, {896}, {0, 32, 128}})
    // down_proj's shape (k = 4864) at prefill rows.
    ->ArgsProduct({{128}, {896}, {4864}, {0, 32, 128}})
    ->ArgsProduct({{1, 8}, {151936}, {896}, {0, 32, 128}})
    ->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
