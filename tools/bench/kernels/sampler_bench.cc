// Google Benchmark of one sampling step over a 151,936-token row (Qwen2.5's vocabulary): the
// filters a request may ask for, including the worst cases a client controls (a top_k just below
// the vocabulary, top_p near 1 at temperature 100), against plain temperature sampling.
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "engine/sampler.h"

namespace {

// Args: top_k (0 = off), top_p × 1000, temperature × 10.
void BM_Sample(benchmark::State& state) {
  constexpr int kVocab = 151936;
  std::mt19937 rng(1);
  std::normal_distribution<float> d(0.0f, 3.0f);
  std::vector<float> row(kVocab);
  for (auto& x : row) x = d(rng);
  loom::SamplingParams p;
  p.top_k = static_cast<int>(state.range(0));
  p.top_p = static_cast<float>(state.range(1)) / 1000.0f;
  p.temperature = static_cast<float>(state.range(2)) / 10.0f;
  p.seed = 3;
  loom::Sampler s(p, {});
  std::vector<float> logits(kVocab);
  for (auto _ : state) {
    logits = row;  // Sample filters the row in place
    auto t = s.Sample(logits.data(), kVocab, nullptr, nullptr);
    benchmark::DoNotOptimize(t);
  }
}

BENCHMARK(BM_Sample)
    ->Args({0, 1000, 10})        // temperature only
    ->Args({50, 1000, 10})       // the usual top_k
    ->Args({0, 900, 10})         // the usual top_p
    ->Args({1000, 1000, 10})     // a large top_k
    ->Args({151935, 1000, 10})   // top_k just below the vocabulary
    ->Args({151935, 999, 1000})  // and top_p near 1 at temperature 100
    ->Args({0, 999, 1000})       // top_p near 1 at temperature 100 (a flat row)
    ->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
