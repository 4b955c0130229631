// `loom bench --closed-loop C`: the serving load generator's workload run on the engine alone (no HTTP), as the reference for the HTTP path's cost.
#include "cli/bench_closed_loop.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <random>
#include <unordered_map>

#include "base/json.h"
#include "base/thread_pool.h"
#include "cli/commands.h"
#include "cli/request_check.h"
#include "engine/engine.h"
#include "ops/matmul.h"

namespace loom::cli {

namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double pos = p / 100.0 * static_cast<double>(v.size() - 1);
  const size_t lo = static_cast<size_t>(pos);
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (pos - static_cast<double>(lo));
}

Status ValidateClosedLoopArgs(const Model& model, const ClosedLoopArgs& a) {
  if (a.clients < 1 || a.clients > 4096) return InvalidArgument("--closed-loop must be in [1, 4096]");
  if (a.requests < 1 || a.requests > 1000000) return InvalidArgument("--requests must be in [1, 1000000]");
  if (a.max_num_seqs < 1 || a.max_num_seqs > 4096) return InvalidArgument("--max-num-seqs must be in [1, 4096]");
  if (a.max_batch_tokens < 1 || a.max_batch_tokens > (1 << 20)) {
    return InvalidArgument("--max-num-batched-tokens must be in [1, 1048576]");
  }
  RETURN_IF_ERROR(ValidateTargetStepMs(a.target_step_ms, "--target-step-ms"));
  if (a.prompt_len < 1) return InvalidArgument("--prompt-len must be at least 1");
  if (a.gen_tokens < 1) return InvalidArgument("--gen-tokens must be at least 1");
  SamplingParams p;
  p.max_tokens = a.gen_tokens;
  RETURN_IF_ERROR(ValidateRequestSize(model.config(), p, a.prompt_len));
  const int64_t in_flight = std::min(a.clients, a.max_num_seqs);
  RETURN_IF_ERROR(model.CheckStepMemory(a.max_batch_tokens, int64_t{a.prompt_len} + a.gen_tokens));
  return model.CheckKvCacheTokens(in_flight * (a.prompt_len + a.gen_tokens) + 64,
                                  KvCacheDtypeFor(model.config()));
}

// C virtual clients, each with one request in flight: when a request finishes, its client's
// next request joins before the next step (a client with no latency). Request i has its own
// random prompt (seeded by i, so no prefix-cache hits) and adapter i % adapters (none = base),
// as tools/bench/serve/load_gen.py sends them.
int RunClosedLoopBench(Model* model, const ClosedLoopArgs& a,
                       const std::vector<std::shared_ptr<const Adapter>>& adapters) {
  EngineOptions options;
  const int in_flight = std::min(a.clients, a.max_num_seqs);
  options.kv_cache_tokens = in_flight * (a.prompt_len + a.gen_tokens) + 64;
  options.kv_cache_dtype = KvCacheDtypeFor(model->config());
  options.max_batch_tokens = a.max_batch_tokens;
  options.target_step_ms = a.target_step_ms;
  options.max_num_seqs = a.max_num_seqs;
  options.max_loras = 0;
  Engine engine(model, options);
  engine.set_emit_updates(true);
  std::vector<int> slots;
  for (const auto& ad : adapters) slots.push_back(engine.AddAdapter(ad));
  const int vocab = model->config().vocab_size;

  std::unordered_map<int64_t, double> submitted;  // id → submit time (s since t0)
  std::vector<double> ttft, e2e, itl;
  std::unordered_map<int64_t, double> first, last;  // id → time of its first / latest token
  int next = 0;
  int64_t out_tokens = 0;
  const auto t0 = Clock::now();
  auto now_s = [&] { return std::chrono::duration<double>(Clock::now() - t0).count(); };
  auto submit = [&] {
    std::mt19937 rng(static_cast<uint32_t>(a.seed * 1000003u + static_cast<uint32_t>(next)));
    std::uniform_int_distribution<int> token(0, vocab - 1);
    GenerationRequest r;
    for (int i = 0; i < a.prompt_len; ++i) r.prompt.push_back(token(rng));
    r.params.max_tokens = a.gen_tokens;
    r.params.temperature = 0;
    r.params.ignore_eos = true;
    if (!slots.empty()) r.adapter_slot = slots[static_cast<size_t>(next) % slots.size()];
    ++next;
    auto id = engine.Add(std::move(r));
    if (!id.ok()) return id.status();
    submitted[*id] = now_s();
    return OkStatus();
  };
  while (next < std::min(a.clients, a.requests)) {
    if (Status st = submit(); !st.ok()) {
      std::fprintf(stderr, "error: %s\n", st.message().c_str());
      return 1;
    }
  }
  while (engine.HasWork()) {
    engine.Step();
    const double t = now_s();
    for (const SequenceUpdate& u : engine.TakeUpdates()) {
      if (!u.has_token) continue;
      if (!first.count(u.id)) {
        first[u.id] = t;
        ttft.push_back(t - submitted[u.id]);
      } else {
        itl.push_back(t - last[u.id]);
      }
      last[u.id] = t;
    }
    for (const GenerationResult& r : engine.TakeFinished()) {
      if (r.finish_reason == FinishReason::kError) {  // no figures from failed sequences
        std::fprintf(stderr, "error: bench: request %lld: %s\n", static_cast<long long>(r.id),
                     r.error.c_str());
        return 1;
      }
      out_tokens += static_cast<int64_t>(r.generated.size());
      e2e.push_back(t - submitted[r.id]);
      if (next < a.requests) {
        if (Status st = submit(); !st.ok()) {
          std::fprintf(stderr, "error: %s\n", st.message().c_str());
          return 1;
        }
      }
    }
  }
  const double secs = now_s();
  const double rps = a.requests / secs;
  const double tps = static_cast<double>(out_tokens) / secs;
  std::printf("closed loop: %d clients, %d requests of %d + %d tokens, %zu adapters round-robin\n",
              a.clients, a.requests, a.prompt_len, a.gen_tokens, adapters.size());
  std::printf("%.3f req/s, %.1f output tok/s, TTFT p50 %.2f s p99 %.2f s, ITL p50 %.0f ms p99 %.0f ms, "
              "%lld steps, %.1f s\n",
              rps, tps, Percentile(ttft, 50), Percentile(ttft, 99), 1e3 * Percentile(itl, 50),
              1e3 * Percentile(itl, 99), static_cast<long long>(engine.steps()), secs);
  std::fprintf(stderr, "threads %d; %s; peak RSS %.0f MiB\n", ThreadPool::Global().num_threads(),
               MatmulKernelsDescription().c_str(), PeakRssMiB());
  if (a.json) {
    nlohmann::json j = {{"closed_loop",
                         {{"clients", a.clients},
                          {"requests", a.requests},
                          {"prompt_len", a.prompt_len},
                          {"gen_tokens", a.gen_tokens},
                          {"adapters", adapters.size()},
                          {"seconds", secs},
                          {"requests_per_s", rps},
                          {"output_tokens_per_s", tps},
                          {"ttft_p50_s", Percentile(ttft, 50)},
                          {"ttft_p99_s", Percentile(ttft, 99)},
                          {"itl_p50_s", Percentile(itl, 50)},
                          {"itl_p99_s", Percentile(itl, 99)},
                          {"target_step_ms", a.target_step_ms},
                          {"steps", engine.steps()}}},
                        {"peak_rss_mib", PeakRssMiB()},
                        {"threads", ThreadPool::Global().num_threads()},
                        {"kernels", MatmulKernelsDescription()}};
    std::printf("%s\n", JsonToString(j).c_str());
  }
  return 0;
}

}  // namespace loom::cli
