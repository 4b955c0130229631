// Google Benchmark of one projection with LoRA as Linear::Forward runs it (shrink of every segment, base matmul, expand in its epilogue) on Qwen2.5-0.5B shapes, bf16 or int4 base, hot in cache or cycling over 24 layers' copies from DRAM, and of the expand kernel alone, so the adapter's share of a decode step can be read per projection.
#include <benchmark/benchmark.h>

#include <memory>
#include <random>
#include <vector>

#include "base/thread_pool.h"
#include "cpu/cpu_features.h"
#include "cpu/lora_cpu.h"
#include "ops/lora_ops.h"
#include "ops/matmul.h"
#include "ops/matmul_int4.h"
#include "tensor/lora_panels.h"

namespace {

using loom::DType;

struct Projection {
  int64_t out, in;
  int copy = 0;  // which of several identical-shape projections
  std::vector<uint16_t> w;  // [out, in] bf16
  loom::Tensor wt;
  std::unique_ptr<loom::Int4Weight> int4;
  // Per adapter: A [rank, in] bf16, Bᵀ [rank, out] bf16.
  std::vector<std::vector<uint16_t>> a, bp;  // A [rank, in]; B packed (tensor/lora_panels.h)
  std::vector<loom::Tensor> at;
};

constexpr int kRank = 16;

// copy: which of several identical-shape projections (the layers a decode step walks through).
Projection& Get(int64_t out, int64_t in, int adapters, int copy = 0) {
  static std::vector<std::unique_ptr<Projection>> cache;
  for (auto& p : cache) {
    if (p->out == out && p->in == in && static_cast<int>(p->a.size()) >= adapters && p->copy == copy) return *p;
  }
  auto p = std::make_unique<Projection>();
  p->out = out;
  p->in = in;
  p->copy = copy;
  std::mt19937 rng(7);
  std::normal_distribution<float> dist(0, 1);
  p->w.resize(static_cast<size_t>(out * in));
  for (auto& v : p->w) v = loom::F32ToBf16(dist(rng) * 0.05f);
  p->wt = loom::Tensor{DType::kBF16, {out, in}, p->w.data()};
  p->int4 = std::move(loom::QuantizeWeightInt4(p->wt, "bench", 128)).value();
  for (int i = 0; i < adapters; ++i) {
    std::vector<uint16_t> a(static_cast<size_t>(kRank * in)), b(static_cast<size_t>(kRank * out));
    for (auto& v : a) v = loom::F32ToBf16(dist(rng) * 0.05f);
    for (auto& v : b) v = loom::F32ToBf16(dist(rng) * 0.05f);
    std::vector<uint16_t> bp(static_cast<size_t>(loom::LoraPanelsSize(kRank, out)));
    loom::PackLoraPanels(DType::kBF16, b.data(), kRank, out, bp.data());
    p->a.push_back(std::move(a));
    p->bp.push_back(std::move(bp));
  }
  for (int i = 0; i < adapters; ++i) {
    p->at.push_back(loom::Tensor{DType::kBF16, {kRank, in}, p->a[static_cast<size_t>(i)].data()});
  }
  cache.push_back(std::move(p));
  return *cache.back();
}

// Args: out, in, rows (one segment per row, each its own adapter; 0 adapters when lora = 0),
// base (0 = bf16, 1 = int4 g128), lora (0 = base only, 1 = every row adapted), layers (copies
// of the projection run in turn: 1 = hot in cache; 24 = a decode step's walk, weights and
// adapters from DRAM as in a model).
void BM_LoraLinear(benchmark::State& state) {
  const int64_t out = state.range(0), in = state.range(1), rows = state.range(2);
  const bool int4 = state.range(3) == 1, lora = state.range(4) == 1;
  const int layers = static_cast<int>(state.range(5));
  std::vector<Projection*> ps;
  for (int l = 0; l < layers; ++l) ps.push_back(&Get(out, in, static_cast<int>(rows), l));
  std::mt19937 rng(3);
  std::normal_distribution<float> dist(0, 1);
  std::vector<float> x(static_cast<size_t>(rows * in)), y(static_cast<size_t>(rows * out));
  for (auto& v : x) v = dist(rng);
  std::vector<float> t(static_cast<size_t>(rows * kRank));
  auto& opt = loom::GlobalMatmulOptions();
  opt.batch_invariant = true;
  opt.bf16_split = false;
  for (auto _ : state) {
    for (Projection* pp : ps) {
      Projection& p = *pp;
      std::vector<loom::LoraShrinkJob> jobs;
      for (int64_t r = 0; r < rows; ++r) {
        jobs.push_back({x.data() + r * in, 1, &p.at[static_cast<size_t>(r)], t.data() + r * kRank});
      }
      // The shrink as the pre tasks of the base matmul's region, as Linear runs it.
      loom::LoraShrinkPlan plan;
      plan.Build(jobs.data(), jobs.size(), in, loom::ThreadPool::Global().num_threads());
      loom::MatmulEpilogue epilogue;
      epilogue.pre_tasks = plan.num_tasks();
      epilogue.pre = [&](int64_t i) { plan.Run(i); };
      epilogue.block = [&](int64_t j0, int64_t j1) {
        for (int64_t r = 0; r < rows; ++r) {
          loom::LoraExpandAddBlock(t.data() + r * kRank, 1, kRank, DType::kBF16,
                                   p.bp[static_cast<size_t>(r)].data(), out, j0, j1, 0.5f,
                                   y.data() + r * out, out);
        }
      };
      // The blocks' B panels prefetched by the kernel while it computes the block, as Linear.
      epilogue.prefetch = [&](int64_t j0, int64_t j1, loom::cpu::SidePrefetch* side) {
        const loom::LoraPanelRange range = loom::LoraPanelsOf(kRank, j0, j1);
        for (int64_t r = 0; r < rows; ++r) {
          side->Add(p.bp[static_cast<size_t>(r)].data() + range.first, range.count * 2);
        }
      };
      if (int4) {
        loom::MatmulInt4(x.data(), rows, *p.int4, y.data(), lora ? &epilogue : nullptr);
      } else {
        loom::Matmul(x.data(), rows, p.wt, y.data(), lora ? &epilogue : nullptr);
      }
    }
    benchmark::DoNotOptimize(y.data());
  }
  const double lora_bytes = lora ? 2.0 * kRank * (in + out) * rows : 0.0;
  const double base_bytes = int4 ? out * (in / 2.0 + in / 64.0) : 2.0 * out * in;
  state.counters["GB/s"] = benchmark::Counter((base_bytes + lora_bytes) * layers,
                                              benchmark::Counter::kIsIterationInvariantRate,
                                              benchmark::Counter::kIs1000);
}

// The expand alone on one thread, hot in cache: rows × 320 columns (a batch-8 block of a
// 4864-wide projection) of one rank-16 bf16 adapter, y += 0.5·t·Bᵀ. Args: rows.
void BM_LoraExpandAdd(benchmark::State& state) {
  const int64_t rows = state.range(0), out = 320;
  std::mt19937 rng(5);
  std::normal_distribution<float> dist(0, 1);
  std::vector<uint16_t> b(static_cast<size_t>(out * kRank)),
      bp(static_cast<size_t>(loom::LoraPanelsSize(kRank, out)));
  for (auto& v : b) v = loom::F32ToBf16(dist(rng));
  loom::PackLoraPanels(DType::kBF16, b.data(), kRank, out, bp.data());
  std::vector<float> t(static_cast<size_t>(rows * kRank)), y(static_cast<size_t>(rows * out));
  for (auto& v : t) v = dist(rng);
  const loom::cpu::Isa isa = loom::cpu::ActiveIsa();
  for (auto _ : state) {
    loom::cpu::LoraExpandAdd(isa, t.data(), rows, kRank, DType::kBF16, bp.data(), out, 0, out,
                             0.5f, y.data(), out);
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["MAC/ns"] = benchmark::Counter(static_cast<double>(rows * out * kRank) * 1e-9,
                                                benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_LoraExpandAdd)->DenseRange(1, 4)->Arg(8)->Arg(16)->Arg(128);

// One decode row's shrink on one thread, hot in cache, as LoraShrinkPlan runs it (AMX row
// kernel in batch-invariant mode on an AMX CPU, else the f32 FMA kernel): rank 16 bf16 A.
// Args: in, batch_invariant (0/1).
void BM_LoraShrinkRow(benchmark::State& state) {
  const int64_t in = state.range(0);
  auto& opt = loom::GlobalMatmulOptions();
  const loom::MatmulOptions saved = opt;
  opt.batch_invariant = state.range(1) == 1;
  opt.bf16_split = false;
  std::mt19937 rng(9);
  std::normal_distribution<float> dist(0, 1);
  std::vector<uint16_t> a(static_cast<size_t>(kRank * in));
  for (auto& v : a) v = loom::F32ToBf16(dist(rng) * 0.05f);
  const loom::Tensor at{DType::kBF16, {kRank, in}, a.data()};
  std::vector<float> x(static_cast<size_t>(in)), t(kRank);
  for (auto& v : x) v = dist(rng);
  const loom::LoraShrinkJob job{x.data(), 1, &at, t.data()};
  loom::LoraShrinkPlan plan;
  plan.Build(&job, 1, in, 1);
  for (auto _ : state) {
    for (int64_t i = 0; i < plan.num_tasks(); ++i) plan.Run(i);
    benchmark::DoNotOptimize(t.data());
  }
  state.counters["MAC/ns"] = benchmark::Counter(static_cast<double>(kRank * in) * 1e-9,
                                                benchmark::Counter::kIsIterationInvariantRate);
  opt = saved;  // as it was, for the benchmarks after this one
}
BENCHMARK(BM_LoraShrinkRow)->ArgsProduct({{896, 4864}, {0, 1}});

// Qwen2.5-0.5B: gate/up (4864 × 896), down (896 × 4864), q/o (896 × 896), k/v (128 × 896).
BENCHMARK(BM_LoraLinear)
    ->ArgsProduct({{4864}, {896}, {1, 8}, {0, 1}, {0, 1}, {1, 24}})
    ->ArgsProduct({{896}, {4864}, {1, 8}, {0, 1}, {0, 1}, {1, 24}})
    ->ArgsProduct({{896}, {896}, {1, 8}, {0, 1}, {0, 1}, {1}})
    ->ArgsProduct({{128}, {896}, {1, 8}, {0, 1}, {0, 1}, {1}})
    ->UseRealTime();

}  // namespace

// The active ISA level (AMX or not) goes into the report's context with every run.
int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  benchmark::AddCustomContext("loom_isa", loom::cpu::IsaName(loom::cpu::ActiveIsa()));
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
