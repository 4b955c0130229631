// Google Benchmark of the matmul kernels on Qwen2.5-0.5B shapes: exact f32 path vs bf16 dot (split and
// single), at the level LOOM_ISA selects (e.g. LOOM_ISA=avx512bf16 for the dot product without AMX),
// plus the vdpbf16ps peak of one core (BM_Bf16DotPeak), and the f32 FMA peaks (AVX-512, AVX2) the GEMM figures are compared with.
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "base/thread_pool.h"
#include "cpu/cpu_features.h"
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
    // The lm_head (272 MB of bf16): decode from DRAM, not from the L3 the shapes above fit in.
    ->ArgsProduct({{1, 8}, {151936}, {896}, {0}})
    // Small batches (decode at 2-32 rows): where each kernel's crossover lies.
    ->ArgsProduct({{2, 3, 4, 16, 32}, {4864}, {896}, {0}})
    ->ArgsProduct({{128, 512}, {4864}, {896}, {0, 1, 2}})
    ->ArgsProduct({{128, 512}, {896}, {4864}, {0, 1, 2}})
    ->UseRealTime();

// One core's peak rate of a zmm instruction: 24 independent accumulators (enough to cover the
// latency on two ports), operands in registers, written in asm so that the compiler can neither
// fold nor spill the loop. vdpbf16ps: 64 FLOP (32 bf16 multiply-adds); vfmadd231ps: 32 FLOP.
#define LOOM_X24(op)                                                                          \
  op(0) op(1) op(2) op(3) op(4) op(5) op(6) op(7) op(8) op(9) op(10) op(11) op(12) op(13) op(14) \
      op(15) op(16) op(17) op(18) op(19) op(20) op(21) op(22) op(23)
#define LOOM_DP(r) "vdpbf16ps %%zmm30, %%zmm31, %%zmm" #r "\n"
#define LOOM_FMA(r) "vfmadd231ps %%zmm30, %%zmm31, %%zmm" #r "\n"
#define LOOM_CLOBBER24                                                                          \
  "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11", \
      "xmm12", "xmm13", "xmm14", "xmm15", "xmm16", "xmm17", "xmm18", "xmm19", "xmm20", "xmm21",    \
      "xmm22", "xmm23"

__attribute__((target("avx512f,avx512bf16"))) void BM_Bf16DotPeak(benchmark::State& state) {
  if (loom::cpu::DetectIsa() < loom::cpu::Isa::kAvx512Bf16) return state.SkipWithError("no AVX512_BF16");
  constexpr int kIters = 1 << 16;
  for (auto _ : state) {
    for (int i = 0; i < kIters; ++i) __asm__ volatile(LOOM_X24(LOOM_DP)::: LOOM_CLOBBER24);
  }
  state.counters["GFLOPs"] = benchmark::Counter(64.0 * 24 * kIters, benchmark::Counter::kIsIterationInvariantRate,
                                                benchmark::Counter::kIs1000);
}
BENCHMARK(BM_Bf16DotPeak)->UseRealTime();

__attribute__((target("avx512f,fma"))) void BM_F32FmaPeak(benchmark::State& state) {
  if (loom::cpu::DetectIsa() < loom::cpu::Isa::kAvx512) return state.SkipWithError("no AVX-512");
  constexpr int kIters = 1 << 16;
  for (auto _ : state) {
    for (int i = 0; i < kIters; ++i) __asm__ volatile(LOOM_X24(LOOM_FMA)::: LOOM_CLOBBER24);
  }
  state.counters["GFLOPs"] = benchmark::Counter(32.0 * 24 * kIters, benchmark::Counter::kIsIterationInvariantRate,
                                                benchmark::Counter::kIs1000);
}
BENCHMARK(BM_F32FmaPeak)->UseRealTime();

// The AVX2 peak: 14 ymm accumulators (16 FLOP per vfmadd231ps), the bound of the avx2 level's GEMM.
#define LOOM_X14(op) op(0) op(1) op(2) op(3) op(4) op(5) op(6) op(7) op(8) op(9) op(10) op(11) op(12) op(13)
#define LOOM_FMA_Y(r) "vfmadd231ps %%ymm14, %%ymm15, %%ymm" #r "\n"
__attribute__((target("avx2,fma"))) void BM_F32FmaPeakAvx2(benchmark::State& state) {
  if (loom::cpu::DetectIsa() < loom::cpu::Isa::kAvx2) return state.SkipWithError("no AVX2");
  constexpr int kIters = 1 << 16;
  for (auto _ : state) {
    for (int i = 0; i < kIters; ++i) {
      __asm__ volatile(LOOM_X14(LOOM_FMA_Y)::: "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6",
                       "xmm7", "xmm8", "xmm9", "xmm10", "xmm11", "xmm12", "xmm13");
    }
  }
  state.counters["GFLOPs"] = benchmark::Counter(16.0 * 14 * kIters, benchmark::Counter::kIsIterationInvariantRate,
                                                benchmark::Counter::kIs1000);
}
BENCHMARK(BM_F32FmaPeakAvx2)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
