// Google Benchmark of paged attention as a layer runs it: one (row, KV head) call of the kernel
// over a context, and a whole step's Attention over the pool (prefill chunks and decode rows) on
// Qwen2.5-0.5B's heads (14 query, 2 KV, head_dim 64).
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "base/thread_pool.h"
#include "cpu/attention_cpu.h"
#include "cpu/cpu_features.h"
#include "ops/attention.h"

namespace {

std::vector<float> Random(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> x(n);
  for (float& v : x) v = d(rng);
  return x;
}

// args: head_dim, query heads of the KV head, context length. One thread, cache hot.
void BM_AttendHeads(benchmark::State& state) {
  const int hd = static_cast<int>(state.range(0)), heads = static_cast<int>(state.range(1));
  const int ctx = static_cast<int>(state.range(2));
  const int blocks = (ctx + loom::kKvBlockSize - 1) / loom::kKvBlockSize;
  auto k = Random(static_cast<size_t>(blocks) * loom::kKvBlockSize * hd, 1);
  auto v = Random(k.size(), 2), q = Random(static_cast<size_t>(heads) * hd, 3);
  std::vector<int32_t> table(static_cast<size_t>(blocks));
  for (int b = 0; b < blocks; ++b) table[static_cast<size_t>(b)] = blocks - 1 - b;
  loom::cpu::PagedKvHead head{k.data(), v.data(), int64_t{loom::kKvBlockSize} * hd, 0,
                              table.data()};
  std::vector<float> scores(static_cast<size_t>(heads) * ctx), out(static_cast<size_t>(heads) * hd);
  const loom::cpu::Isa isa = loom::cpu::ActiveIsa();
  for (auto _ : state) {
    loom::cpu::AttendHeads(isa, heads, q.data(), hd, hd, head, 0, ctx - 1, 0.125f, 0.0f,
                           scores.data(), ctx, out.data(), hd);
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["key_heads/s"] = benchmark::Counter(static_cast<double>(heads) * ctx,
                                                     benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_AttendHeads)->ArgsProduct({{64}, {1, 4, 7}, {16, 128, 192}})->Args({128, 4, 128});

// A step of `seqs` sequences: each a prefill chunk of `rows` rows at positions 0.. (rows > 1) or
// one decode row at position `rows` = 1 → 160. Qwen2.5-0.5B heads, the global pool (2 threads).
void BM_AttentionStep(benchmark::State& state) {
  const int seqs = static_cast<int>(state.range(0)), rows = static_cast<int>(state.range(1));
  constexpr int kHeads = 14, kKvHeads = 2, kHd = 64;
  const int len = rows > 1 ? rows : 161;
  const int blocks_per_seq = (len + loom::kKvBlockSize - 1) / loom::kKvBlockSize;
  const int n = rows > 1 ? seqs * rows : seqs;
  loom::KvLayerView view;
  view.num_kv_heads = kKvHeads;
  view.head_dim = kHd;
  auto kc = Random(static_cast<size_t>(seqs * blocks_per_seq * view.block_stride()), 4);
  auto vc = Random(kc.size(), 5);
  view.k = kc.data();
  view.v = vc.data();
  std::vector<std::vector<int32_t>> tables(static_cast<size_t>(seqs));
  std::vector<loom::AttentionChunk> chunks;
  for (int s = 0; s < seqs; ++s) {
    for (int b = 0; b < blocks_per_seq; ++b)
      tables[static_cast<size_t>(s)].push_back(s * blocks_per_seq + b);
    loom::AttentionChunk c;
    c.first_row = rows > 1 ? s * rows : s;
    c.num_rows = rows > 1 ? rows : 1;
    c.start_pos = rows > 1 ? 0 : len - 1;
    c.block_table = tables[static_cast<size_t>(s)].data();
    c.num_blocks = blocks_per_seq;
    chunks.push_back(c);
  }
  auto q = Random(static_cast<size_t>(n) * kHeads * kHd, 6);
  std::vector<float> out(q.size());
  for (auto _ : state) {
    loom::Attention(view, chunks, q.data(), kHeads, 0, 0.125f, out.data());
    benchmark::DoNotOptimize(out.data());
  }
}
BENCHMARK(BM_AttentionStep)->Args({8, 128})->Args({1, 128})->Args({32, 1})->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
