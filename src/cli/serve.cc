// `loom serve`: load the model and adapters, start the engine thread and the HTTP server; drain on SIGTERM.
#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <pthread.h>
#include <thread>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include "cli/commands.h"
#include "cli/serve_flags.h"
#include "cli/startup_signals.h"
#include "engine/async_engine.h"
#include "lora/adapter_store.h"
#include "model/weight_memory.h"
#include "ops/matmul.h"
#include "server/http_server.h"

namespace loom::cli {

namespace fs = std::filesystem;

namespace {

int Fail(const std::string& message, int code = 1) {
  std::fprintf(stderr, "error: %s\n", message.c_str());
  return code;
}

// glibc gives each new thread that allocates under contention an arena of its own (up to 8 per
// core), and each arena keeps its high-water mark: with many HTTP connection threads the
// server's RSS climbed in ~10 MiB steps for as long as load ran (64-client soak on a Zen 2, 300 s:
// +73 MiB, 8.8 MiB/min, not levelling off). Two arenas: +15 MiB, flat after warm-up, same
// throughput (docs/PERFORMANCE.md). A MALLOC_ARENA_MAX in the environment is left to glibc.
void LimitMallocArenas() {
#if defined(__GLIBC__)
  if (std::getenv("MALLOC_ARENA_MAX") == nullptr) mallopt(M_ARENA_MAX, 2);
#endif
}

int RunServe(ServeArgs& a) {
  LimitMallocArenas();  // before any thread starts
  // SIGTERM / SIGINT are taken by sigwait on this thread; every thread started below inherits
  // the mask. SIGPIPE (a client gone mid-write) is ignored: the write fails instead.
  sigset_t signals = ServeSignals();
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  std::signal(SIGPIPE, SIG_IGN);
  StartupSignalWatcher startup_signals(signals);  // until ready: a signal ends start-up at once

  if (a.model.empty()) {  // the bundled demo: the model and, unless told otherwise, its adapters
    a.model = FindDemoModelDir();
    if (a.model.empty()) {
      return Fail("no --model given and the bundled demo model (models/demo) was not found", 2);
    }
    if (a.loras.empty() && a.merge.empty()) a.loras = DemoAdapterSpecs(a.model);
    std::fprintf(stderr, "loom: no --model: serving the bundled demo model %s\n", a.model.c_str());
  }
  auto plan = PlanServe(a);
  if (!plan.ok()) return Fail(plan.status().message(), 2);

  server::ServerContext ctx;
  ctx.options = plan->server;
  ctx.encode_gate.SetHandlerThreads(ctx.options.http.worker_threads);
  server::HttpServer http(&ctx);
  Status bound = http.Bind();
  if (!bound.ok()) {
    return Fail("--host " + ctx.options.http.host + " --port " + std::to_string(ctx.options.http.port) +
                ": " + bound.message());
  }
  std::thread listener([&http] { http.Listen(); });
  // An exception from here on (out of memory loading the model, a thread that cannot start)
  // would unwind past a joinable thread: std::terminate instead of main's "error: out of
  // memory". The listener is stopped and joined on every way out.
  struct JoinListener {
    server::HttpServer& http;
    std::thread& listener;
    ~JoinListener() {
      if (!listener.joinable()) return;
      try {
        http.Stop();
      } catch (...) {
      }
      listener.join();
    }
  } join_listener{http, listener};
  if (a.api_key_given && ctx.options.api_key.empty()) {
    std::fprintf(stderr, "loom: warning: --api-key (or LOOM_API_KEY) is empty: authentication is off\n");
  }
  // An IPv6 address goes in brackets in a URL (http://[::1]:8000).
  const std::string& h = ctx.options.http.host;
  const std::string url_host = h.find(':') != std::string::npos ? "[" + h + "]" : h;
  std::fprintf(stderr, "loom: listening on http://%s:%d (loading %s; /health is 503 until ready)\n",
               url_host.c_str(), http.port(), a.model.c_str());

  auto stop_listener = [&] {
    http.Stop();
    listener.join();
  };
  auto t0 = std::chrono::steady_clock::now();
  auto model = Model::Load(a.model, LoadOptionsFromFlags(/*no_check_weights=*/false));
  if (!model.ok()) {
    stop_listener();
    return Fail(model.status().message());
  }
  // The planned KV cache must fit this machine (a failed allocation would leave it empty: a
  // server that says ready and refuses every request).
  if (Status kv =
          (*model)->CheckKvCacheTokens(plan->engine.kv_cache_tokens, plan->engine.kv_cache_dtype);
      !kv.ok()) {
    stop_listener();
    return Fail("--kv-cache-memory " + a.kv_cache_memory + " / --max-num-seqs / --max-model-len: " +
                    kv.message(),
                2);
  }
  if (Status step = (*model)->CheckStepMemory(plan->engine.max_batch_tokens, plan->engine.max_model_len);
      !step.ok()) {
    stop_listener();
    return Fail("--max-num-batched-tokens / --max-model-len: " + step.message(), 2);
  }
  std::fprintf(stderr, "loom: model %s loaded (%.1f s, %.0f MiB of weights); kernels: %s\n",
               a.model.c_str(),
               std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
               static_cast<double>((*model)->weight_bytes()) / (1 << 20),
               MatmulKernelsDescription().c_str());
  if ((*model)->quantized_bytes() > 0) {
    // Name the scheme: the checkpoint's format, or what --quantize made at load.
    std::string scheme = (*model)->prequantized();
    if (scheme.empty()) {
      std::map<std::string, int> count;
      for (const WeightMemory& w : DescribeWeightMemory(**model)) {
        if (w.scheme.starts_with("int") || w.scheme.starts_with("bitsandbytes")) ++count[w.scheme];
      }
      for (const auto& [name, n] : count) scheme += (scheme.empty() ? "" : ", ") + name;
    }
    std::fprintf(stderr, "loom: weights quantized: %s (%.1f MiB)\n", scheme.c_str(),
                 static_cast<double>((*model)->quantized_bytes()) / (1 << 20));
  }
  std::unique_ptr<tokenizer::Tokenizer> tok;
  auto has_tokenizer = tokenizer::HasTokenizerFiles(a.model);
  if (!has_tokenizer.ok()) {
    stop_listener();
    return Fail(has_tokenizer.status().message());
  }
  if (!*has_tokenizer && !plan->chat_template.empty()) {
    stop_listener();
    return Fail("--chat-template needs the model folder's tokenizer, and " + a.model + " has none");
  }
  if (*has_tokenizer) {
    auto loaded = tokenizer::Tokenizer::FromModelDir(
        a.model, *tokenizer::ParseTokenizerMode(a.tokenizer_mode));
    if (!loaded.ok()) {
      stop_listener();
      return Fail(loaded.status().message());
    }
    tok = std::move(loaded).value();
    // --chat-template replaces the folder's; a folder template that exists but cannot be read
    // stops the server (it was silently dropped, and chat requests then got 400s).
    StatusOr<std::string> source =
        plan->chat_template.empty() ? LoadChatTemplate(a.model, "", false) : plan->chat_template;
    if (!source.ok() && source.status().code() != StatusCode::kNotFound) {
      stop_listener();
      return Fail("chat template of " + a.model + ": " + source.status().message());
    }
    if (source.ok()) {
      auto parsed = ChatTemplate::Parse(*source);
      if (!parsed.ok()) {
        stop_listener();
        const std::string from =
            plan->chat_template.empty() ? "chat template of " + a.model : "--chat-template";
        return Fail(from + ": " + parsed.status().message());
      }
      ctx.chat_template = std::move(parsed).value();
    }
  }
  // Adapters: every start-up adapter is loaded and validated now; a bad one stops the server.
  std::unique_ptr<AdapterStore> store;
  if (!plan->merge.empty()) {
    auto adapter = LoadAdapter(plan->merge, plan->loras.front().second, (*model)->sites(), a.max_lora_rank);
    if (adapter.ok()) NoteAdapterConfig(**adapter, a.model);
    Status st = adapter.ok() ? (*model)->MergeAdapter(**adapter) : adapter.status();
    if (!st.ok()) {
      stop_listener();
      return Fail(st.message());
    }
    std::fprintf(stderr, "loom: adapter '%s' merged into the base weights\n", plan->merge.c_str());
  } else {
    store = std::make_unique<AdapterStore>(&(*model)->sites(), plan->store);
    for (const auto& [name, dir] : plan->loras) {
      Status st = store->Register(name, dir);
      if (!st.ok()) {
        stop_listener();
        return Fail(st.message());
      }
      std::fprintf(stderr, "loom: adapter '%s' loaded from %s\n", name.c_str(), dir.c_str());
    }
  }
  // Batch invariance (default): a request's output never depends on what it is batched with.
  GlobalMatmulOptions().batch_invariant = !a.no_batch_invariant;
  if (!a.no_batch_invariant) {  // every bf16 matmul then runs on AMX where the CPU has it
    auto packed = (*model)->PackWeightsForAmx();
    if (!packed.ok()) {
      stop_listener();
      return Fail(packed.status().message());
    }
    if (*packed > 0) {
      std::fprintf(stderr, "loom: bf16 weights repacked as AMX tiles (%.0f MiB)\n",
                   static_cast<double>(*packed) / (1 << 20));
    }
  }
  EngineOptions eo = plan->engine;
  // The store (declared before the engine, so it outlives it) trims to --max-cpu-loras / memory
  // once the leases of finished sequences are gone, not only on the next adapter request.
  if (store) eo.on_sequences_finished = [s = store.get()] { s->Trim(); };
  AsyncEngine engine(model->get(), eo, tok.get());
  if (eo.kv_cache_tokens > 0 && engine.engine().kv_cache().num_blocks() == 0) {
    // The allocation failed (a cgroup or RLIMIT_AS below the machine's memory): a server that
    // says ready and refuses every request helps no one.
    stop_listener();
    return Fail("--kv-cache-memory " + a.kv_cache_memory + ": the KV cache of " +
                    std::to_string(eo.kv_cache_tokens) + " tokens could not be allocated",
                2);
  }
  ctx.engine = &engine;
  // Declared after the engine (and the store), so destroyed before them: an exception from
  // here on stops the HTTP side first, and no handler routes into a destroyed engine while
  // JoinListener (declared before them) waits to join.
  struct StopHttpFirst {
    server::HttpServer& http;
    ~StopHttpFirst() {
      try {
        http.Stop();
      } catch (...) {
      }
    }
  } stop_http_first{http};
  ctx.adapters = store.get();
  ctx.tokenizer = tok.get();
  ctx.max_model_len = engine.max_model_len();
  ctx.max_loras = eo.max_loras;
  if (!ctx.options.generation_defaults.empty()) {
    // vLLM prints the same notice: these change what a request without them samples.
    std::fprintf(stderr,
                 "loom: requests that set none use the model's recommended sampling: %s "
                 "(--generation-config vllm turns this off)\n",
                 ctx.options.generation_defaults.Describe().c_str());
  }
  startup_signals.Stop();  // from here sigwait below takes them and drains
  ctx.ready = true;
  std::fprintf(stderr,
               "loom: ready — model '%s' (%s), %zu adapter(s), max_model_len %d, KV cache %d "
               "tokens (%s), max_num_seqs %d, max_loras %d\n"
               "loom: try: curl http://%s:%d/v1/models\n",
               ctx.options.served_model_name().c_str(), a.model.c_str(), plan->loras.size(),
               ctx.max_model_len, eo.kv_cache_tokens, KvDtypeName(eo.kv_cache_dtype),
               eo.max_num_seqs, eo.max_loras, url_host.c_str(), http.port());

  int sig = 0;
  sigwait(&signals, &sig);
  std::fprintf(stderr, "loom: %s: draining (up to %.0f s)\n", sig == SIGTERM ? "SIGTERM" : "SIGINT",
               a.shutdown_timeout_s);
  ctx.draining = true;
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::duration<double>(a.shutdown_timeout_s);
  // Requests accepted before the signal finish: those still in a handler (an adapter loading,
  // a prompt being tokenized) as well as those in the engine, and their answers are written
  // out. Only counting the engine's sequences dropped the former with a reset connection.
  auto wait_while = [](auto busy, auto until) {
    while (busy() && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  };
  wait_while([&] {
    return engine.num_in_flight() > 0 || http.num_unanswered() > 0 || http.num_handler_tasks() > 0;
  }, deadline);
  const int aborted = engine.num_in_flight();
  ctx.encode_gate.Close();  // prompts waiting to be tokenized or being tokenized: 503
  engine.Stop();  // aborts what is left: their streams end with finish_reason "abort"
  // Their last chunks and bodies (and the 503s of handlers that submit now) are written, for
  // at most 2 s more: a client that does not read is not waited for.
  wait_while([&] { return http.num_unanswered() > 0 || http.num_handler_tasks() > 0; },
             std::chrono::steady_clock::now() + std::chrono::seconds(2));
  // Handler tasks count too: one whose client has left (an adapter load, say) is no longer
  // unanswered, and stopping the listener joins it.
  if (const int64_t busy = std::max(http.num_unanswered(), http.num_handler_tasks()); busy > 0) {
    // A handler still working (loading an adapter, say; tokenizing stops at Close) would hold
    // the exit past the deadline for as long as it takes (four 24 MiB prompts took 22 s before
    // tokenizing stopped there). The deadline is the deadline: exit now; the kernel closes their
    // connections.
    std::fprintf(stderr,
                 "loom: stopped (%d sequence(s) aborted at the deadline; %lld request(s) still in "
                 "a handler, their connections closed)\n",
                 aborted, static_cast<long long>(busy));
    std::fflush(stdout);
    std::fflush(stderr);
    std::_Exit(0);
  }
  stop_listener();
  std::fprintf(stderr, "loom: stopped (%d sequence(s) aborted at the deadline)\n", aborted);
  return 0;
}

}  // namespace

RunFn AddServeCommand(CLI::App& app) {
  auto args = std::make_shared<ServeArgs>();
  AddServeFlags(app, args.get());
  const CLI::Option* key = app.get_option("--api-key");
  return [args, key] {
    // CLI11 skips an empty environment variable: LOOM_API_KEY="$KEY" with $KEY unset would
    // turn authentication off without the warning --api-key '' prints.
    const char* env = std::getenv("LOOM_API_KEY");
    args->api_key_given = key->count() > 0 || (env != nullptr && *env == '\0');
    return RunServe(*args);
  };
}

}  // namespace loom::cli
