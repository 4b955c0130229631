// `loom serve` flags (vLLM's names) and their translation into engine, store and server options.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <utility>
#include <vector>

#include "engine/engine.h"
#include "lora/adapter_store.h"
#include "server/server_context.h"

namespace loom::cli {

struct ServeArgs {
  std::string model;
  std::string tokenizer_mode = "auto";  // --tokenizer-mode
  std::vector<std::string> served_model_names;  // --served-model-name a [b ...]
  std::vector<std::string> loras;      // NAME=DIR or {"name","path","base_model_name"}
  std::vector<std::string> lora_dirs;
  int max_loras = 8;
  int max_lora_rank = 0;
  int max_cpu_loras = 64;
  std::string max_cpu_lora_memory;  // --max-cpu-lora-memory; empty = no limit
  int max_lora_names = 4096;        // --max-lora-names: registered + on-demand names
  std::string merge;
  int max_num_seqs = 64;
  int max_num_batched_tokens = 512;
  double target_step_ms = kServeTargetStepMs;  // --target-step-ms
  int max_model_len = 0;
  std::string kv_cache_memory = "2GiB";
  std::string host = "127.0.0.1";
  int port = 8000;
  std::string api_key;
  bool api_key_given = false;  // --api-key was on the command line (an empty one: auth off)
  bool allow_runtime_lora = false;
  bool enable_lora = false;  // vLLM's --enable-lora: accepted, changes nothing
  // vLLM's --enable-server-load-tracking: accepted, /load always counts.
  bool enable_server_load_tracking = false;
  // vLLM's --return-tokens-as-token-ids: log-prob tokens as "token_id:N".
  bool return_tokens_as_token_ids = false;
  int http_threads = 16;
  int max_connections = 4096;
  double request_timeout_s = 30;
  int max_waiting = 512;
  std::string max_body = "8MiB";
  double shutdown_timeout_s = 30;
  bool no_prefix_caching = false;
  bool no_batch_invariant = false;
  std::string generation_config = "auto";  // --generation-config: auto | vllm | DIR
  std::string override_generation_config;  // --override-generation-config JSON
  std::string chat_template;               // --chat-template FILE or an inline template
};

struct ServePlan {
  EngineOptions engine;
  AdapterStoreOptions store;
  server::ServerOptions server;
  std::vector<std::pair<std::string, std::string>> loras;  // name, dir
  std::string merge;
  std::string chat_template;  // --chat-template's source (replaces the model folder's); "" = none
};

void AddServeFlags(CLI::App& app, ServeArgs* args);
// Checks the flags and sizes the KV cache from the model's config; errors name the flag.
StatusOr<ServePlan> PlanServe(const ServeArgs& args);
// vLLM's --chat-template: the file at `value`, or, when no such file exists and `value` holds
// one of '{', '}' or a newline, `value` itself as the template. Anything else (a path that
// cannot be read) is an error naming the flag.
StatusOr<std::string> ChatTemplateFromFlag(const std::string& value);
// "2GiB", "512MiB", "1e9" → bytes.
StatusOr<uint64_t> ParseBytes(const std::string& text, const std::string& flag);

}  // namespace loom::cli
