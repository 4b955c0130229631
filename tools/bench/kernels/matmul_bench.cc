// Google Benchmark of the matmul kernels on Qwen2.5-0.5B shapes: exact f32 path vs bf16 dot (split and
// single), at the level LOOM_ISA selects (e.g. LOOM_ISA=avx512bf16 for the dot product without AMX),
// plus the vdpbf16ps peak of one core (BM_Bf16DotPeak), the f32 FMA peaks (AVX-512, AVX2) the GEMM figures are compared with,
// and the DRAM read bandwidth with 1-8 sequential streams per thread (BM_ReadStreams), the decode kernels' bound.
#include <benchmark/benchmark.h>
#include <immintrin.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "base/thread_pool.h"
#include "cpu/amx_tiles.h"
#include "cpu/cpu_features.h"
#include "cpu/matmul_cpu.h"
#include "ops/matmul.h"

namespace {

using loom::DType;

// Args: rows n, out m, in k, mode (0 = f32 activations, 1 = bf16 split, 2 = bf16 single, 3 = 2
// cold, 4 = 2 with the weights packed as AMX tiles (PackWeightForAmx, as `loom serve`), 5 = 4
// cold).
void BM_Matmul(benchmark::State& state) {
  const int64_t n = state.range(0), m = state.range(1), k = state.range(2);
  int mode = static_cast<int>(state.range(3));
  std::mt19937 rng(1);
  std::normal_distribution<float> dist(0, 1);
  std::vector<float> x(static_cast<size_t>(n * k));
  for (auto& v : x) v = dist(rng);
  // Mode 3: mode 2 with the weights cold, as in a forward pass whose model exceeds the L3: a
  // ring of copies (640 MiB in all, more than this Xeon's 480 MiB L3), one per call.
  const bool cold = mode == 3 || mode == 5;
  const bool packed = mode >= 4;
  if (mode >= 3) mode = 2;
  const int copies =
      cold ? static_cast<int>(std::max<int64_t>(1, (int64_t{640} << 20) / (m * k * 2))) : 1;
  std::vector<std::vector<uint16_t>> ws(copies, std::vector<uint16_t>(static_cast<size_t>(m * k)));
  for (auto& v : ws[0]) v = loom::F32ToBf16(dist(rng) * 0.05f);
  for (size_t c = 1; c < ws.size(); ++c) ws[c] = ws[0];  // same values, other memory
  std::vector<float> y(static_cast<size_t>(n * m));
  auto& opt = loom::GlobalMatmulOptions();
  opt.bf16_dot_min_rows = mode == 0 ? 0 : 1;
  opt.bf16_split = mode == 1;
  std::vector<std::unique_ptr<loom::AmxPackedWeight>> pw;
  if (packed) {
    if (loom::cpu::ActiveIsa() != loom::cpu::Isa::kAmx) {
      state.SkipWithError("packed weights need the amx level");
      return;
    }
    for (auto& w : ws) {
      auto p = loom::PackWeightForAmx(loom::Tensor{DType::kBF16, {m, k}, w.data()}, "bench");
      if (!p.ok()) {
        state.SkipWithError("packing failed");
        return;
      }
      pw.push_back(std::move(p).value());
      std::vector<uint16_t>().swap(w);  // the packed copy replaces it (same ring size)
    }
  }
  int ci = 0;
  for (auto _ : state) {
    loom::Tensor wt{DType::kBF16, {m, k}, packed ? nullptr : ws[ci].data()};
    const loom::AmxPackedWeight* amx = packed ? pw[ci].get() : nullptr;
    if (++ci == copies) ci = 0;
    loom::Matmul(x.data(), n, wt, y.data(), nullptr, amx);
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
    // The attention projections at prefill rows (q/o 896 × 896, k/v 128 × 896).
    ->ArgsProduct({{128}, {896, 128}, {896}, {0}})
    // Llama-3.2-1B's k = 2048 (gate/up: 8192 × 2048) at prefill rows.
    ->ArgsProduct({{128}, {8192}, {2048}, {0}})
    // Decode to prefill row counts with the weights hot (in L2/L3) and cold (from DRAM).
    ->ArgsProduct({{1, 2, 4, 8, 16, 32, 128}, {4864}, {896}, {3}})
    ->ArgsProduct({{2, 3, 4, 8}, {8192}, {2048}, {3}})
    ->ArgsProduct({{4, 8}, {8960}, {1536}, {3}})
    ->ArgsProduct({{1, 8, 32, 128}, {896}, {4864}, {2, 3}})
    // The packed layout `loom serve` reads, hot and cold, at serving step sizes.
    ->ArgsProduct({{1, 32, 64, 96, 128}, {4864}, {896}, {4, 5}})
    ->ArgsProduct({{32, 96}, {896}, {4864}, {4, 5}})
    // The packed lm_head at serving decode row counts (two 272 MB copies: from DRAM).
    ->ArgsProduct({{1, 8, 32}, {151936}, {896}, {5}})
    ->ArgsProduct({{512, 1024}, {4864, 896}, {896}, {4}})
    ->ArgsProduct({{512, 1024}, {896}, {4864}, {4}})
    ->UseRealTime();

// One core's AMX-BF16 rate (TDPBF16PS: 16×16×32 multiply-adds = 16,384 FLOP), the bound of the
// AMX GEMM: Arg 0 = products only (operands stay in tiles); 1 = a 2 × 2 block of C tiles with its
// two weight and two activation tiles loaded before each step's 4 products (the GEMM kernel's
// pattern: one 1 KiB tile load per product), from a 32 KiB L1-resident buffer at moving
// addresses; 2 = the same with only the activation pair reloaded (half a load per product);
// 3 = pattern 1 reloading the same addresses every step (as slow as 1: the cost is the loads'
// count, not where they point).
__attribute__((target("amx-tile,amx-bf16"))) void BM_AmxTilePeak(benchmark::State& state) {
  if (!loom::cpu::AmxAvailable()) return state.SkipWithError("no AMX-BF16");
  const int pattern = static_cast<int>(state.range(0));
  loom::cpu::ConfigureAmxTiles();
  std::vector<uint16_t> buf(16384, 0x3f80);  // 32 KiB of bf16 1.0: weight tiles, then activations
  constexpr int kSteps = 1 << 12;
  for (auto _ : state) {
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    for (int i = 0; i < kSteps; ++i) {
      const int64_t step = pattern == 3 ? 0 : (i & 7) * 1024;  // 2 KiB (two tiles) per step
      const uint16_t* a = buf.data() + step;
      const uint16_t* b = buf.data() + 8192 + step;
      if (pattern == 1 || pattern == 3) {
        _tile_loadd(4, a, 64);
        _tile_loadd(5, a + 512, 64);
      }
      if (pattern != 0) {
        _tile_loadd(6, b, 64);
        _tile_loadd(7, b + 512, 64);
      }
      _tile_dpbf16ps(0, 4, 6);
      _tile_dpbf16ps(1, 4, 7);
      _tile_dpbf16ps(2, 5, 6);
      _tile_dpbf16ps(3, 5, 7);
    }
    alignas(64) float c[256];
    _tile_stored(0, c, 64);
    benchmark::DoNotOptimize(c);
  }
  state.counters["GFLOPs"] =
      benchmark::Counter(4.0 * 16384 * kSteps, benchmark::Counter::kIsIterationInvariantRate,
                         benchmark::Counter::kIs1000);
  state.counters["ns/product"] = benchmark::Counter(
      4.0 * kSteps, benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_AmxTilePeak)->DenseRange(0, 3)->UseRealTime();

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

// Streaming read bandwidth: a 1 GiB buffer split over the pool's threads, each thread's part read
// as S sequential streams at once (its part cut in S pieces, 64 bytes of each per step). One
// stream per core can underestimate what a core pulls: on a Zen 2 VM (2 threads, best of 5) one
// window read 33-34 GB/s with one stream per thread and 45-48 with 4, a busier one 28-32 and
// 31-32; loom's 4-stream bf16 decode read 35 GB/s where numpy's one-stream figure was 30-31.
// Arg: streams per thread.
template <int S>
__attribute__((target("avx2"))) int64_t ReadStreams(const uint8_t* p, int64_t n) {
  __m256i acc[S];
  for (int s = 0; s < S; ++s) acc[s] = _mm256_setzero_si256();
  const int64_t part = n / S / 64 * 64;
  for (int64_t i = 0; i < part; i += 64) {
    for (int s = 0; s < S; ++s) {
      const auto* q = reinterpret_cast<const __m256i*>(p + s * part + i);
      acc[s] = _mm256_xor_si256(acc[s], _mm256_xor_si256(_mm256_load_si256(q), _mm256_load_si256(q + 1)));
    }
  }
  for (int s = 1; s < S; ++s) acc[0] = _mm256_xor_si256(acc[0], acc[s]);
  return _mm256_extract_epi64(acc[0], 0);
}

void BM_ReadStreams(benchmark::State& state) {
  if (loom::cpu::DetectIsa() < loom::cpu::Isa::kAvx2) return state.SkipWithError("no AVX2");
  const int streams = static_cast<int>(state.range(0));
  constexpr int64_t kBytes = int64_t{1} << 30;
  auto* buf = static_cast<uint8_t*>(std::aligned_alloc(64, kBytes));
  if (!buf) return state.SkipWithError("could not allocate 1 GiB");
  std::memset(buf, 1, kBytes);
  loom::ThreadPool& pool = loom::ThreadPool::Global();
  const int64_t threads = pool.num_threads(), part = kBytes / threads / 4096 * 4096;
  std::vector<int64_t> sink(static_cast<size_t>(threads));
  for (auto _ : state) {
    pool.ParallelFor(threads, [&](int64_t t, int) {
      const uint8_t* p = buf + t * part;
      sink[static_cast<size_t>(t)] = streams == 1   ? ReadStreams<1>(p, part)
                                     : streams == 2 ? ReadStreams<2>(p, part)
                                     : streams == 4 ? ReadStreams<4>(p, part)
                                                    : ReadStreams<8>(p, part);
    });
    benchmark::DoNotOptimize(sink.data());
  }
  std::free(buf);
  state.counters["GB/s"] = benchmark::Counter(static_cast<double>(part * threads), benchmark::Counter::kIsIterationInvariantRate,
                                              benchmark::Counter::kIs1000);
}
BENCHMARK(BM_ReadStreams)->Arg(1)->Arg(2)->Arg(4)->Arg(8)->UseRealTime()->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
