// Google Benchmark of the matmul kernels on Qwen2.5-0.5B shapes: exact f32 path vs bf16 dot (split and single).
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "base/thread_pool.h"
#include "ops/matmul.h"

namespace {

using loom::DType;

// Args: rows n, out m, in k, mode (0 = f32 activations, 1 = bf16 split, 2 = bf16 single).
void BM_Matmul(benchmark::State& state) {
  const int64_t n = state.range(0), m = state.range(1), k = state.range(2);
  const int mode = static_cast<int>(state.range(3));
  std::mt19937 rng(1);
  std::normal_distribution<float> dist(0, 1);
  std::vector<float> x(static_cast<size_t>(n * k));
  for (auto& v : x) v = dist(rng);
  std::vector<uint16_t> w(static_cast<size_t>(m * k));
  for (auto& v : w) v = loom::F32ToBf16(dist(rng) * 0.05f);
  std::vector<float> y(static_cast<size_t>(n * m));
  loom::Tensor wt{DType::kBF16, {m, k}, w.data()};
  auto& opt = loom::GlobalMatmulOptions();
  opt.bf16_dot_min_rows = mode == 0 ? 0 : 1;
  opt.bf16_split = mode == 1;
  for (auto _ : state) {
    loom::Matmul(x.data(), n, wt, y.data());
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["GFLOPs"] = benchmark::Counter(2.0 * n * m * k, benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
  state.counters["GB/s(W)"] = benchmark::Counter(2.0 * m * k, benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
}

BENCHMARK(BM_Matmul)
    ->ArgsProduct({{1, 8, 128}, {4864}, {896}, {0, 1, 2}})
    ->ArgsProduct({{1, 128}, {896}, {4864}, {0, 1, 2}})
    ->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
