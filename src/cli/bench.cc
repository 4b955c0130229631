// `loom bench`: prefill and decode tokens/s at batch 1 and batch N on random prompts.
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <random>

#include "base/thread_pool.h"
#include "cli/commands.h"
#include "engine/engine.h"

namespace loom::cli {

namespace {

struct BenchArgs {
  std::string model;
  int prompt_len = 128;
  int gen_tokens = 64;
  std::vector<int> batches = {1, 8};
  int repeats = 2;
  bool json = false;
};

struct Figures {
  double prefill_tps = 0;  // prompt tokens / s
  double decode_tps = 0;   // generated tokens / s, all sequences together
};

// One measurement: `batch` sequences, each prefilled (as one step) then decoded together.
Figures Measure(Model* model, const BenchArgs& a, int batch, uint64_t seed) {
  using Clock = std::chrono::steady_clock;
  EngineOptions options;
  options.kv_cache_tokens = batch * (a.prompt_len + a.gen_tokens) + 64;
  options.max_batch_tokens = batch * a.prompt_len;
  options.max_num_seqs = batch;
  Engine engine(model, options);
  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::uniform_int_distribution<int> token(0, model->config().vocab_size - 1);
  for (int b = 0; b < batch; ++b) {
    GenerationRequest r;
    for (int i = 0; i < a.prompt_len; ++i) r.prompt.push_back(token(rng));
    r.params.max_tokens = a.gen_tokens;
    r.params.temperature = 0;
    r.params.ignore_eos = true;
    (void)engine.Add(std::move(r));
  }
  auto t0 = Clock::now();
  engine.Step();  // all prompts in one step
  auto t1 = Clock::now();
  while (engine.Step()) {
  }
  auto t2 = Clock::now();
  Figures f;
  f.prefill_tps = batch * a.prompt_len / std::chrono::duration<double>(t1 - t0).count();
  f.decode_tps = batch * (a.gen_tokens - 1) / std::chrono::duration<double>(t2 - t1).count();
  return f;
}

int RunBench(const BenchArgs& a) {
  auto model = Model::Load(a.model);
  if (!model.ok()) {
    std::fprintf(stderr, "error: %s\n", model.status().message().c_str());
    return 1;
  }
  Measure(model->get(), a, 1, 0);  // warm the page cache and the pool
  nlohmann::json out = nlohmann::json::array();
  std::printf("%-8s %14s %14s\n", "batch", "prefill tok/s", "decode tok/s");
  for (int batch : a.batches) {
    Figures best;
    for (int r = 0; r < a.repeats; ++r) {
      Figures f = Measure(model->get(), a, batch, static_cast<uint64_t>(r + 1));
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
  std::fprintf(stderr, "threads %d; weights %.1f MiB; peak RSS %.0f MiB\n",
               ThreadPool::Global().num_threads(), (*model)->weight_bytes() / 1048576.0,
               PeakRssMiB());
  if (a.json) {
    nlohmann::json j = {{"results", out}, {"peak_rss_mib", PeakRssMiB()},
                        {"threads", ThreadPool::Global().num_threads()}};
    std::printf("%s\n", j.dump().c_str());
  }
  return 0;
}

}  // namespace

RunFn AddBenchCommand(CLI::App& cmd) {
  auto a = std::make_shared<BenchArgs>();
  cmd.add_option("--model", a->model, "Hugging Face checkpoint folder")->required();
  cmd.add_option("--prompt-len", a->prompt_len, "prompt tokens per sequence")->capture_default_str();
  cmd.add_option("--gen-tokens", a->gen_tokens, "generated tokens per sequence")->capture_default_str();
  cmd.add_option("--batch", a->batches, "batch sizes to measure")->delimiter(',');
  cmd.add_option("--repeats", a->repeats, "runs per batch size (best is reported)");
  cmd.add_flag("--json", a->json, "also print the figures as one JSON object");
  return [a] { return RunBench(*a); };
}

}  // namespace loom::cli
