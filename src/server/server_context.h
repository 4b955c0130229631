// ServerContext: what the HTTP handlers share — engine, adapter store, tokenizer, template, metrics.
#pragma once

#include <algorithm>
#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/async_engine.h"
#include "engine/generation_defaults.h"
#include "lora/adapter_store.h"
#include "server/encode_gate.h"
#include "server/http_transport.h"
#include "server/metrics.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace loom::server {

struct ServerOptions {
  TransportOptions http;               // address, limits, timeouts, handler threads
  std::string api_key;                // empty = no auth
  // Every name a request may give the base (vLLM's --served-model-name a b), at least one; each
  // is listed in /v1/models and echoed back by a response.
  std::vector<std::string> served_model_names;
  std::string model_dir;
  std::string merged_adapter;  // --merge NAME: requests name NAME, the base is folded
  // The base's first name: the metrics' model_name, the adapters' parent.
  const std::string& served_model_name() const { return served_model_names.front(); }
  // Whether a request naming `name` runs on the served weights without an adapter: a served
  // name, or with --merge only the merged adapter's (the base is not served then).
  bool NamesBase(const std::string& name) const {
    if (!merged_adapter.empty()) return name == merged_adapter;
    return std::find(served_model_names.begin(), served_model_names.end(), name) !=
           served_model_names.end();
  }
  // What a request that names no model gets (as vLLM): the first served name, or the merged one.
  const std::string& DefaultModel() const {
    return merged_adapter.empty() ? served_model_name() : merged_adapter;
  }
  bool allow_runtime_lora = false;    // /v1/load_lora_adapter and /v1/unload_lora_adapter
  // vLLM's --return-tokens-as-token-ids: what a request without return_tokens_as_token_ids gets.
  bool return_tokens_as_token_ids = false;
  int max_waiting = 512;              // sequences queued beyond the running ones → 503
  int max_json_depth = 64;
  // --generation-config / --override-generation-config: what a request that sets no
  // temperature, top_p, ... or max_tokens runs with (vLLM's default_sampling_params).
  GenerationDefaults generation_defaults;
};

// Thread-safety: the pointers are set once before `ready` becomes true; everything they point
// to is thread-safe (AsyncEngine, AdapterStore, Tokenizer Encode/Decode, ChatTemplate Render).
struct ServerContext {
  ServerOptions options;
  std::atomic<bool> ready{false};     // model loaded: /health 200, /v1 routes served
  std::atomic<bool> draining{false};  // SIGTERM: new generation requests get 503
  // Sequences that handlers have passed through the --max-waiting check and not yet handed to
  // the engine: counted as waiting, so handlers checking at once cannot each pass it.
  std::atomic<int64_t> admitting{0};
  // The engine's updates that every request's client has not taken yet, in PendingBytes: past
  // StreamWriter::kMaxAllPendingBytes, streams far behind are dropped.
  std::atomic<size_t> pending_update_bytes{0};
  // GET /load's server_load (vLLM's): generation requests in flight, from when their route
  // hands them to a handler thread until their answer is built and their sequences have ended.
  std::atomic<int64_t> server_load{0};
  AsyncEngine* engine = nullptr;
  AdapterStore* adapters = nullptr;   // null with --merge
  const tokenizer::Tokenizer* tokenizer = nullptr;  // null when the folder has none
  std::optional<ChatTemplate> chat_template;
  int max_model_len = 0;
  int max_loras = 0;
  Metrics metrics;
  // Large prompts are tokenized one at a time (mutable: handlers get a const context).
  mutable EncodeGate encode_gate;
};

// Counts a generation request in ctx.server_load while any copy of the returned hold lives.
inline std::shared_ptr<const void> HoldServerLoad(ServerContext& ctx) {
  ctx.server_load.fetch_add(1);
  return std::shared_ptr<const void>(nullptr,
                                     [&ctx](const void*) { ctx.server_load.fetch_sub(1); });
}

}  // namespace loom::server
