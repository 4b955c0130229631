// `loom bench`: prefill and decode tokens/s at batch 1 and batch N on random prompts.
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <random>

#include "base/check.h"
#include "base/json.h"
#include "base/thread_pool.h"
#include "cli/bench_closed_loop.h"
#include "cli/commands.h"
#include "cli/lora_cli.h"
#include "engine/engine.h"
#include "lora/adapter.h"
#include "ops/matmul.h"

namespace loom::cli {

namespace {

struct BenchArgs {
  std::string model;
  int prompt_len = 128;
  int gen_tokens = 64;
  std::vector<int> batches = {1, 8};
  int repeats = 2;
  bool json = false;
  std::vector<std::string> loras;  // with adapters: base vs unmerged vs merged vs mixed
  bool no_check_weights = false;
  bool batch_invariant = false;  // the kernels loom serve uses (on there by default)
  ClosedLoopArgs closed;           // --closed-loop C: the serving workload, engine alone
};

// Every size a measurement allocates from, checked before the first one: figures for a
// negative batch would be made up.
Status ValidateBenchArgs(const Model& model, const BenchArgs& a) {
  constexpr int kMaxBatch = 4096;
  if (a.prompt_len < 1) return InvalidArgument("--prompt-len must be at least 1");
  if (a.gen_tokens < 2) return InvalidArgument("--gen-tokens must be at least 2 (one decode step)");
  if (a.repeats < 1) return InvalidArgument("--repeats must be at least 1");
  if (a.batches.empty()) return InvalidArgument("--batch: give at least one batch size");
  int widest = a.loras.empty() ? 1 : std::max(8, static_cast<int>(a.loras.size()));
  for (int b : a.batches) {
    if (b < 1 || b > kMaxBatch) {
      return InvalidArgument("--batch " + std::to_string(b) + " is outside [1, " +
                             std::to_string(kMaxBatch) + "]");
    }
    widest = std::max(widest, b);
  }
  SamplingParams p;
  p.max_tokens = a.gen_tokens;
  RETURN_IF_ERROR(ValidateRequestSize(model.config(), p, a.prompt_len));
  // Each measurement prefills its batch in one step.
  RETURN_IF_ERROR(model.CheckStepMemory(int64_t{widest} * a.prompt_len, int64_t{a.prompt_len} + a.gen_tokens));
  return model.CheckKvCacheTokens(int64_t{widest} * (a.prompt_len + a.gen_tokens) + 64,
                                  KvCacheDtypeFor(model.config()));
}

struct Figures {
  double prefill_tps = 0;  // prompt tokens / s
  double decode_tps = 0;   // generated tokens / s, all sequences together
  std::string error;       // a sequence ended in an error (e.g. non-finite logits): no figures
};

// False (after printing the error) when a measurement's sequences did not all run through.
bool Measured(const Figures& f) {
  if (f.error.empty()) return true;
  std::fprintf(stderr, "error: bench: %s\n", f.error.c_str());
  return false;
}

// One measurement: `batch` sequences, each prefilled (as one step) then decoded together.
// Sequence b uses adapters[b % size] (none = base).
Figures Measure(Model* model, const BenchArgs& a, int batch, uint64_t seed,
                const std::vector<std::shared_ptr<const Adapter>>& adapters = {}) {
  using Clock = std::chrono::steady_clock;
  EngineOptions options;
  options.kv_cache_tokens = batch * (a.prompt_len + a.gen_tokens) + 64;
  options.kv_cache_dtype = KvCacheDtypeFor(model->config());
  options.max_batch_tokens = batch * a.prompt_len;
  options.max_num_seqs = batch;
  Engine engine(model, options);
  std::vector<int> slots;
  for (const auto& ad : adapters) slots.push_back(engine.AddAdapter(ad));
  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::uniform_int_distribution<int> token(0, model->config().vocab_size - 1);
  for (int b = 0; b < batch; ++b) {
    GenerationRequest r;
    for (int i = 0; i < a.prompt_len; ++i) r.prompt.push_back(token(rng));
    r.params.max_tokens = a.gen_tokens;
    r.params.temperature = 0;
    r.params.ignore_eos = true;
    if (!slots.empty()) r.adapter_slot = slots[static_cast<size_t>(b) % slots.size()];
    auto id = engine.Add(std::move(r));
    LOOM_CHECK(id.ok());  // ValidateBenchArgs checked every size first
  }
  auto t0 = Clock::now();
  engine.Step();  // all prompts in one step
  auto t1 = Clock::now();
  while (engine.Step()) {
  }
  auto t2 = Clock::now();
  Figures f;
  // Review finding: a sequence that failed at its first step (NaN weights) still gave a figure
  // (50,000,000 tok/s).
  for (const GenerationResult& r : engine.TakeFinished()) {
    if (r.finish_reason == FinishReason::kError && f.error.empty()) f.error = r.error;
  }
  f.prefill_tps = batch * a.prompt_len / std::chrono::duration<double>(t1 - t0).count();
  f.decode_tps = batch * (a.gen_tokens - 1) / std::chrono::duration<double>(t2 - t1).count();
  return f;
}

// Adapter overheads, side by side in one run (scenarios interleaved, best of --repeats, and the
// median of each repeat's adapter ÷ base decode ratio):
// base vs one adapter unmerged vs merged at batch 1; 8 base sequences vs 8 sequences each
// with a different adapter; adapter load time from a warm page cache.
int RunLoraBench(Model* model, const BenchArgs& a) {
  using Clock = std::chrono::steady_clock;
  std::vector<std::shared_ptr<const Adapter>> adapters;
  for (size_t i = 0; i < a.loras.size(); ++i) {
    auto ad = LoadAdapter("a" + std::to_string(i), LoraFolder(a.loras[i]), model->sites(), 0,
                          !a.no_check_weights);
    if (!ad.ok()) {
      std::fprintf(stderr, "error: %s\n", ad.status().message().c_str());
      return 1;
    }
    adapters.push_back(*ad);
  }
  std::vector<double> load_ms;
  for (int i = 0; i < 5; ++i) {
    auto t0 = Clock::now();
    auto ad = LoadAdapter("load", LoraFolder(a.loras[0]), model->sites(), 0, !a.no_check_weights);
    if (!ad.ok()) {  // a load that fails is no figure (a NAME=DIR spec timed a failure: 0.00 ms)
      std::fprintf(stderr, "error: %s\n", ad.status().message().c_str());
      return 1;
    }
    load_ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  std::sort(load_ms.begin(), load_ms.end());
  auto merged = Model::Load(a.model, LoadOptionsFromFlags(a.no_check_weights));
  Status merge_status = merged.ok() ? (*merged)->MergeAdapter(*adapters[0]) : merged.status();
  if (merge_status.ok() && a.batch_invariant)
    merge_status = (*merged)->PackWeightsForAmx().status();
  if (!merge_status.ok()) {
    std::fprintf(stderr, "error: cannot build the merged model: %s\n",
                 merge_status.message().c_str());
    return 1;
  }
  const int wide = std::max(8, static_cast<int>(adapters.size()));
  struct Row { const char* name; Figures best; };
  Row rows[] = {{"base, batch 1", {}}, {"adapter unmerged, batch 1", {}}, {"adapter merged, batch 1", {}},
                {"base, batch 8", {}}, {"8 different adapters, batch 8", {}}};
  if (!Measured(Measure(model, a, 1, 0, {adapters[0]}))) return 1;  // warm-up
  // Decode ratios within each repeat (adapter ÷ base, measured seconds apart): on a VM whose
  // speed drifts by ±15 % over minutes, their median is steadier than a ratio of two bests.
  std::vector<double> one_ratio, wide_ratio;
  for (int r = 0; r < a.repeats; ++r) {
    const uint64_t seed = static_cast<uint64_t>(r + 1);
    Figures f[5] = {Measure(model, a, 1, seed), Measure(model, a, 1, seed, {adapters[0]}),
                    Measure(merged->get(), a, 1, seed), Measure(model, a, wide, seed),
                    Measure(model, a, wide, seed, adapters)};
    for (const Figures& x : f) {
      if (!Measured(x)) return 1;
    }
    for (int i = 0; i < 5; ++i) {
      rows[i].best.prefill_tps = std::max(rows[i].best.prefill_tps, f[i].prefill_tps);
      rows[i].best.decode_tps = std::max(rows[i].best.decode_tps, f[i].decode_tps);
    }
    if (f[0].decode_tps > 0) one_ratio.push_back(f[1].decode_tps / f[0].decode_tps);
    if (f[3].decode_tps > 0) wide_ratio.push_back(f[4].decode_tps / f[3].decode_tps);
  }
  auto median = [](const std::vector<double>& v) { return Percentile(v, 50); };
  nlohmann::json out = nlohmann::json::array();
  std::printf("%-32s %14s %14s\n", "scenario", "prefill tok/s", "decode tok/s");
  for (const Row& row : rows) {
    std::printf("%-32s %14.1f %14.1f\n", row.name, row.best.prefill_tps, row.best.decode_tps);
    out.push_back({{"scenario", row.name}, {"prefill_tokens_per_s", row.best.prefill_tps},
                   {"decode_tokens_per_s", row.best.decode_tps}});
  }
  std::printf("decode, adapter / base within a repeat (median of %zu): one adapter at batch 1 %.3f, "
              "%d different adapters at batch %d %.3f\n",
              one_ratio.size(), median(one_ratio), wide, wide, median(wide_ratio));
  std::printf("adapter load (warm page cache): best %.2f ms, median %.2f ms; %zu adapters of %.1f MiB; "
              "batch-8 scenario uses %d sequences over %zu adapters\n",
              load_ms[0], load_ms[2], adapters.size(), adapters[0]->tensor_bytes() / 1048576.0, wide,
              adapters.size());
  if (a.json) {
    nlohmann::json j = {{"lora_results", out}, {"adapter_load_ms_best", load_ms[0]},
                        {"decode_ratio_one_adapter_median", median(one_ratio)},
                        {"decode_ratio_wide_adapters_median", median(wide_ratio)},
                        {"adapter_load_ms_median", load_ms[2]},
                        {"adapter_bytes", adapters[0]->tensor_bytes()},
                        {"num_adapters", adapters.size()}, {"peak_rss_mib", PeakRssMiB()},
                        {"threads", ThreadPool::Global().num_threads()}};
    std::printf("%s\n", JsonToString(j).c_str());
  }
  return 0;
}

// --closed-loop: adapters (if any) round-robin over the requests, none for the base.
int RunClosedLoop(Model* model, const BenchArgs& a) {
  ClosedLoopArgs c = a.closed;
  c.prompt_len = a.prompt_len;
  c.gen_tokens = a.gen_tokens;
  c.json = a.json;
  if (Status st = ValidateClosedLoopArgs(*model, c); !st.ok()) {
    std::fprintf(stderr, "error: %s\n", st.message().c_str());
    return 2;
  }
  std::vector<std::shared_ptr<const Adapter>> adapters;
  for (size_t i = 0; i < a.loras.size(); ++i) {
    auto ad = LoadAdapter("a" + std::to_string(i), LoraFolder(a.loras[i]), model->sites(), 0, !a.no_check_weights);
    if (!ad.ok()) {
      std::fprintf(stderr, "error: %s\n", ad.status().message().c_str());
      return 1;
    }
    adapters.push_back(*ad);
  }
  return RunClosedLoopBench(model, c, adapters);
}

int RunBench(const BenchArgs& a) {
  auto model = Model::Load(a.model, LoadOptionsFromFlags(a.no_check_weights));
  if (!model.ok()) {
    std::fprintf(stderr, "error: %s\n", model.status().message().c_str());
    return 1;
  }
  if (Status st = ValidateBenchArgs(**model, a); !st.ok()) {
    std::fprintf(stderr, "error: %s\n", st.message().c_str());
    return 2;
  }
  if (a.batch_invariant) {  // as loom serve: the bf16 weights as AMX tiles where that applies
    if (auto packed = (*model)->PackWeightsForAmx(); !packed.ok()) {
      std::fprintf(stderr, "error: %s\n", packed.status().message().c_str());
      return 1;
    }
  }
  if (a.closed.clients > 0) return RunClosedLoop(model->get(), a);
  if (!a.loras.empty()) return RunLoraBench(model->get(), a);
  if (!Measured(Measure(model->get(), a, 1, 0))) return 1;  // warm the page cache and the pool
  nlohmann::json out = nlohmann::json::array();
  std::printf("%-8s %14s %14s\n", "batch", "prefill tok/s", "decode tok/s");
  for (int batch : a.batches) {
    Figures best;
    for (int r = 0; r < a.repeats; ++r) {
      Figures f = Measure(model->get(), a, batch, static_cast<uint64_t>(r + 1));
      if (!Measured(f)) return 1;
      best.prefill_tps = std::max(best.prefill_tps, f.prefill_tps);
      best.decode_tps = std::max(best.decode_tps, f.decode_tps);
    }
    std::printf("%-8d %14.1f %14.1f\n", batch, best.prefill_tps, best.decode_tps);
    out.push_back({{"batch", batch},
                   {"prompt_len", a.prompt_len},
                   {"gen_tokens", a.gen_tokens},
                   {"prefill_tokens_per_s", best.prefill_tps},
                   {"decode_tokens_per_s", best.decode_tps}});
  }
  std::fprintf(stderr, "threads %d; %s; weights %.1f MiB; peak RSS %.0f MiB\n",
               ThreadPool::Global().num_threads(), MatmulKernelsDescription().c_str(), (*model)->weight_bytes() / 1048576.0,
               PeakRssMiB());
  if (a.json) {
    nlohmann::json j = {{"results", out}, {"peak_rss_mib", PeakRssMiB()},
                        {"threads", ThreadPool::Global().num_threads()},
                        {"kernels", MatmulKernelsDescription()}};
    std::printf("%s\n", JsonToString(j).c_str());
  }
  return 0;
}

}  // namespace

RunFn AddBenchCommand(CLI::App& cmd) {
  auto a = std::make_shared<BenchArgs>();
  cmd.add_option("--model", a->model, "Hugging Face checkpoint folder")->required();
  cmd.add_option("--prompt-len", a->prompt_len, "prompt tokens per sequence")->capture_default_str();
  cmd.add_option("--gen-tokens", a->gen_tokens, "generated tokens per sequence")->capture_default_str();
  CLI::Option* batch =
      cmd.add_option("--batch", a->batches, "batch sizes to measure (with --lora: 1 and 8 only; not with --closed-loop)")
          ->delimiter(',');
  CLI::Option* repeats = cmd.add_option("--repeats", a->repeats, "runs per batch size (best is reported)");
  cmd.add_flag("--json", a->json, "also print the figures as one JSON object");
  cmd.add_option("--lora", a->loras,
                 "adapters: measure base vs unmerged vs merged, and a batch with a different "
                 "adapter per sequence");
  AddNoCheckWeightsFlag(&cmd, &a->no_check_weights);
  cmd.add_flag("--batch-invariant", a->batch_invariant,
               "measure the batch-invariant kernels loom serve uses by default");
  cmd.add_option("--closed-loop", a->closed.clients,
                 "run the serving workload on the engine alone: C clients, each with one request "
                 "in flight (adapters given by --lora round-robin); no HTTP")
      ->check(CLI::Range(1, INT32_MAX));
  // The closed loop's own flags: refused without --closed-loop (they were ignored unread).
  const std::vector<CLI::Option*> closed_only = {
      cmd.add_option("--requests", a->closed.requests, "--closed-loop: requests in all")->capture_default_str(),
      cmd.add_option("--max-num-seqs", a->closed.max_num_seqs, "--closed-loop: sequences running at once")
          ->capture_default_str(),
      cmd.add_option("--max-num-batched-tokens", a->closed.max_batch_tokens,
                     "--closed-loop: token rows per step")->capture_default_str(),
      cmd.add_option("--target-step-ms", a->closed.target_step_ms,
                     "--closed-loop: step time while sequences decode, as loom serve")->capture_default_str(),
      cmd.add_option("--seed", a->closed.seed, "--closed-loop: prompt seed")};
  return [a, batch, repeats, closed_only] {
    // A flag the chosen measurement does not read is an error naming it, never dropped.
    const bool closed = a->closed.clients > 0;
    for (const CLI::Option* o : closed_only) {
      if (!closed && o->count() > 0) {
        std::fprintf(stderr, "error: %s applies to --closed-loop only\n", o->get_name().c_str());
        return 2;
      }
    }
    for (const CLI::Option* o : {batch, repeats}) {  // its clients set the batch, and it runs once
      if (closed && o->count() > 0) {
        std::fprintf(stderr, "error: %s is not read with --closed-loop\n", o->get_name().c_str());
        return 2;
      }
    }
    if (batch->count() > 0 && !a->loras.empty()) {  // `--batch 1 8 --lora …`: what it measures
      for (int b : a->batches) {
        if (b != 1 && b != 8) {
          std::fprintf(stderr, "error: --batch %d with --lora: the adapter bench measures batch 1 (one "
                       "adapter) and 8 (8 different adapters) only\n", b);
          return 2;
        }
      }
    }
    GlobalMatmulOptions().batch_invariant = a->batch_invariant;
    return RunBench(*a);
  };
}

}  // namespace loom::cli
