// Google Benchmark of the matmul kernels on Qwen2.5-0.5B shapes: exact f32 path vs bf16 dot (split and
// single), at the level LOOM_ISA selects (e.g. LOOM_ISA=avx512bf16 for the dot product without AMX),
// plus the vdpbf16ps peak of one core (BM_Bf16DotPeak) the GEMM figures are compared with.
#include <benchmark/benchmark.h>
#include <immintrin.h>

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
    ->ArgsProduct({{1, 8}, {4864}, {896}, {0, 1, 2}})
    ->ArgsProduct({{1}, {896}, {4864}, {0, 1, 2}})
    ->ArgsProduct({{128, 512}, {4864}, {896}, {0, 1, 2}})
    ->ArgsProduct({{128, 512}, {896}, {4864}, {0, 1, 2}})
    ->UseRealTime();

// One core's vdpbf16ps rate: 24 independent accumulators (enough to cover the latency on two
// ports), 64 FLOP (32 bf16 multiply-adds) per instruction, operands in registers.
__attribute__((target("avx512f,avx512bf16"))) void BM_Bf16DotPeak(benchmark::State& state) {
  __m512 acc[24];
  for (auto& a : acc) a = _mm512_setzero_ps();
  const __m512bh x = (__m512bh)_mm512_set1_epi16(0x3f80), w = (__m512bh)_mm512_set1_epi16(0x3c00);
  constexpr int kIters = 1 << 16;
  for (auto _ : state) {
    for (int i = 0; i < kIters; ++i) {
      for (auto& a : acc) a = _mm512_dpbf16_ps(a, x, w);
      __asm__ volatile("" : "+v"(acc[0]), "+v"(acc[7]), "+v"(acc[15]), "+v"(acc[23]));
    }
  }
  __m512 s = acc[0];
  for (int i = 1; i < 24; ++i) s = _mm512_add_ps(s, acc[i]);
  benchmark::DoNotOptimize(s);
  state.counters["GFLOPs"] = benchmark::Counter(64.0 * 24 * kIters, benchmark::Counter::kIsIterationInvariantRate,
                                                benchmark::Counter::kIs1000);
}
BENCHMARK(BM_Bf16DotPeak)->ThreadRange(1, 2)->UseRealTime();

// One core's f32 FMA rate (vfmadd231ps zmm, 32 FLOP), same loop: names the clock and FMA ports
// the dot-product rate is compared with.
__attribute__((target("avx512f,fma"))) void BM_F32FmaPeak(benchmark::State& state) {
  __m512 acc[24];
  for (auto& a : acc) a = _mm512_setzero_ps();
  const __m512 x = _mm512_set1_ps(1.0f), w = _mm512_set1_ps(1e-9f);
  constexpr int kIters = 1 << 16;
  for (auto _ : state) {
    for (int i = 0; i < kIters; ++i) {
      for (auto& a : acc) a = _mm512_fmadd_ps(x, w, a);
      __asm__ volatile("" : "+v"(acc[0]), "+v"(acc[7]), "+v"(acc[15]), "+v"(acc[23]));
    }
  }
  __m512 s = acc[0];
  for (int i = 1; i < 24; ++i) s = _mm512_add_ps(s, acc[i]);
  benchmark::DoNotOptimize(s);
  state.counters["GFLOPs"] = benchmark::Counter(32.0 * 24 * kIters, benchmark::Counter::kIsIterationInvariantRate,
                                                benchmark::Counter::kIs1000);
}
BENCHMARK(BM_F32FmaPeak)->ThreadRange(1, 2)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
