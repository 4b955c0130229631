// Google Benchmark of paged attention as a layer runs it: one (row, KV head) call of the kernel
// over a context, and a whole step's Attention over the pool (prefill chunks and decode rows) on
// Qwen2.5-0.5B's heads (14 query, 2 KV, head_dim 64).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

#include "base/thread_pool.h"
#include "cpu/attention_cpu.h"
#include "cpu/cpu_features.h"
#include "ops/attention.h"
#include "tensor/dtype.h"
#include "tensor/tensor.h"

namespace {

std::vector<float> Random(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> x(n);
  for (float& v : x) v = d(rng);
  return x;
}

std::vector<uint16_t> ToBf16(const std::vector<float>& x) {
  std::vector<uint16_t> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = loom::F32ToBf16(x[i]);
  return out;
}

// args: head_dim, query heads of the KV head, context length, cache dtype (0 f32, 1 bf16). One
// thread, cache hot.
void BM_AttendHeads(benchmark::State& state) {
  const int hd = static_cast<int>(state.range(0)), heads = static_cast<int>(state.range(1));
  const int ctx = static_cast<int>(state.range(2));
  const bool bf16 = state.range(3) != 0;
  const int blocks = (ctx + loom::kKvBlockSize - 1) / loom::kKvBlockSize;
  auto k = Random(static_cast<size_t>(blocks) * loom::kKvBlockSize * hd, 1);
  auto v = Random(k.size(), 2), q = Random(static_cast<size_t>(heads) * hd, 3);
  std::vector<int32_t> table(static_cast<size_t>(blocks));
  for (int b = 0; b < blocks; ++b) table[static_cast<size_t>(b)] = blocks - 1 - b;
  const auto kb = ToBf16(k), vb = ToBf16(v);
  loom::cpu::PagedKvHead head{k.data(), v.data(), int64_t{loom::kKvBlockSize} * hd, 0,
                              table.data()};
  loom::cpu::PagedKvHeadBf16 head16{kb.data(), vb.data(), int64_t{loom::kKvBlockSize} * hd, 0,
                                    table.data()};
  std::vector<float> scores(static_cast<size_t>(heads) * ctx), out(static_cast<size_t>(heads) * hd);
  const loom::cpu::Isa isa = loom::cpu::ActiveIsa();
  for (auto _ : state) {
    if (bf16) {
      loom::cpu::AttendHeads(isa, heads, q.data(), hd, hd, head16, 0, ctx - 1, 0.125f, 0.0f,
                             scores.data(), ctx, out.data(), hd);
    } else {
      loom::cpu::AttendHeads(isa, heads, q.data(), hd, hd, head, 0, ctx - 1, 0.125f, 0.0f,
                             scores.data(), ctx, out.data(), hd);
    }
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["key_heads/s"] = benchmark::Counter(static_cast<double>(heads) * ctx,
                                                     benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_AttendHeads)
    ->ArgsProduct({{64}, {1, 4, 7}, {16, 128, 192}, {0}})
    ->Args({128, 4, 128, 0})
    ->ArgsProduct({{64}, {7}, {128, 192, 512, 2048}, {1}})
    ->ArgsProduct({{128}, {4}, {512, 2048}, {1}});

// A step of `seqs` sequences: each a prefill chunk of `rows` rows at positions 0.. (rows > 1) or
// one decode row at position `rows` = 1 → 160. Qwen2.5-0.5B heads, the global pool (2 threads).
// cold = 1: each iteration reads other blocks, scattered over a 640 MiB pool (more than this
// Xeon's L3), as decode rows find their sequences' blocks after a forward pass's weights.
// bf16 = 1: a bf16 cache (--kv-cache-dtype bfloat16).
void BM_AttentionStep(benchmark::State& state) {
  const int seqs = static_cast<int>(state.range(0)), rows = static_cast<int>(state.range(1));
  const bool cold = state.range(2) != 0;
  const bool bf16 = state.range(3) != 0;
  constexpr int kHeads = 14, kKvHeads = 2, kHd = 64;
  const int len = rows > 1 ? rows : 161;
  const int blocks_per_seq = (len + loom::kKvBlockSize - 1) / loom::kKvBlockSize;
  const int n = rows > 1 ? seqs * rows : seqs;
  loom::KvLayerView view;
  view.num_kv_heads = kKvHeads;
  view.head_dim = kHd;
  const int64_t step_blocks = int64_t{seqs} * blocks_per_seq;
  view.dtype = bf16 ? loom::KvDtype::kBf16 : loom::KvDtype::kF32;
  const int64_t block_bytes = view.block_stride() * loom::KvDtypeSize(view.dtype) * 2;  // K and V
  const int copies = cold ? static_cast<int>(std::max<int64_t>(1, (int64_t{640} << 20) / (step_blocks * block_bytes))) : 1;
  const int64_t pool = step_blocks * copies;
  auto kc = Random(static_cast<size_t>(pool * view.block_stride()), 4);
  auto vc = Random(kc.size(), 5);
  // The pool in an AlignedBuffer, as KvCache keeps it (huge pages where THP allows).
  const size_t pool_bytes = kc.size() * static_cast<size_t>(loom::KvDtypeSize(view.dtype));
  loom::AlignedBuffer<uint8_t> kp, vp;
  if (!kp.Resize(pool_bytes).ok() || !vp.Resize(pool_bytes).ok()) {
    state.SkipWithError("out of memory");
    return;
  }
  if (bf16) {
    const auto kb = ToBf16(kc), vb = ToBf16(vc);
    std::memcpy(kp.data(), kb.data(), pool_bytes);
    std::memcpy(vp.data(), vb.data(), pool_bytes);
  } else {
    std::memcpy(kp.data(), kc.data(), pool_bytes);
    std::memcpy(vp.data(), vc.data(), pool_bytes);
  }
  std::vector<float>().swap(kc);
  std::vector<float>().swap(vc);
  view.k = kp.data();
  view.v = vp.data();
  std::vector<int32_t> ids(static_cast<size_t>(pool));
  for (int64_t b = 0; b < pool; ++b) ids[static_cast<size_t>(b)] = static_cast<int32_t>(b);
  std::shuffle(ids.begin(), ids.end(), std::mt19937(7));
  // tables[copy][seq]: blocks_per_seq scattered block ids each.
  std::vector<std::vector<std::vector<int32_t>>> tables(static_cast<size_t>(copies));
  std::vector<std::vector<loom::AttentionChunk>> steps(static_cast<size_t>(copies));
  size_t next = 0;
  for (int c = 0; c < copies; ++c) {
    auto& t = tables[static_cast<size_t>(c)];
    t.resize(static_cast<size_t>(seqs));
    for (int s = 0; s < seqs; ++s) {
      for (int b = 0; b < blocks_per_seq; ++b) t[static_cast<size_t>(s)].push_back(ids[next++]);
      loom::AttentionChunk ch;
      ch.first_row = rows > 1 ? s * rows : s;
      ch.num_rows = rows > 1 ? rows : 1;
      ch.start_pos = rows > 1 ? 0 : len - 1;
      ch.block_table = t[static_cast<size_t>(s)].data();
      ch.num_blocks = blocks_per_seq;
      steps[static_cast<size_t>(c)].push_back(ch);
    }
  }
  auto q = Random(static_cast<size_t>(n) * kHeads * kHd, 6);
  std::vector<float> out(q.size());
  int ci = 0;
  for (auto _ : state) {
    loom::Attention(view, steps[static_cast<size_t>(ci)], q.data(), kHeads, 0, 0.125f, out.data());
    if (++ci == copies) ci = 0;
    benchmark::DoNotOptimize(out.data());
  }
}
BENCHMARK(BM_AttentionStep)
    ->Args({8, 128, 0, 0})
    ->Args({1, 128, 0, 0})
    ->Args({32, 1, 0, 0})
    ->Args({32, 1, 1, 0})
    ->Args({8, 128, 1, 0})
    ->Args({8, 128, 0, 1})
    ->Args({32, 1, 0, 1})
    ->Args({32, 1, 1, 1})
    ->Args({8, 128, 1, 1})
    ->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
