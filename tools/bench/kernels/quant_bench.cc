// Google Benchmark of the quantized matmul ops (int8 W8A8, int4 W4A8 groups 32/128) on Qwen2.5-0.5B shapes, with weight bytes/s against the memory roofline.
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "ops/matmul_int4.h"
#include "ops/matmul_int8.h"

namespace {

// Args: rows n, out m, in k, scheme (0 = int8, 32 / 128 = int4 with that group).
void BM_Quant(benchmark::State& state) {
  const int64_t n = state.range(0), m = state.range(1), k = state.range(2);
  const int scheme = static_cast<int>(state.range(3));
  std::mt19937 rng(1);
  std::normal_distribution<float> dist(0, 1);
  std::vector<float> x(static_cast<size_t>(n * k)), w(static_cast<size_t>(m * k));
  for (auto& v : x) v = dist(rng);
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
  state.counters["GFLOPs"] = benchmark::Counter(2.0 * n * m * k, benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
  state.counters["GB/s(W)"] = benchmark::Counter(static_cast<double>(bytes), benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
}

BENCHMARK(BM_Quant)
    ->ArgsProduct({{1, 8, 128}, {4864}, {896}, {0, 32, 128}})
    ->ArgsProduct({{1}, {151936}, {896}, {0, 32, 128}})
    ->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
