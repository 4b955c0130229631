// `loom serve` flags: registration, validation and sizing (KV cache from --kv-cache-memory).
#include "cli/serve_flags.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <vector>

#include "base/file.h"
#include "base/json.h"
#include "cli/commands.h"
#include "cli/lora_cli.h"
#include "lora/adapter_store.h"
#include "model/config.h"

namespace loom::cli {

namespace fs = std::filesystem;

void AddServeFlags(CLI::App& app, ServeArgs* a) {
  app.add_option("--model", a->model,
                 "Hugging Face model folder (default: the bundled demo model, models/demo, with "
                 "its adapters)");
  app.add_option("--tokenizer-mode", a->tokenizer_mode,
                 "how the tokenizer is built: auto (as transformers 5's AutoTokenizer) or "
                 "tokenizers (tokenizer.json exactly as the tokenizers library reads it)")
      ->check(CLI::IsMember({"auto", "tokenizers"}));
  app.add_option("--served-model-name", a->served_model_names,
                 "the base model's name in requests (default: the folder's name); several names "
                 "(vLLM's form) are all accepted, the first is the one metrics carry");
  app.add_option("--lora", a->loras,
                 "adapter NAME=DIR, or vLLM's JSON {\"name\",\"path\",\"base_model_name\"} (repeatable)");
  app.add_option("--lora-dir", a->lora_dirs,
                 "folder whose sub-folders are adapters loaded on first use; also the only place "
                 "the load endpoint reads from (repeatable)");
  app.add_option("--max-loras", a->max_loras, "distinct adapters in one step")->capture_default_str();
  app.add_option("--max-lora-rank", a->max_lora_rank, "largest adapter rank accepted (0 = any)");
  app.add_option("--max-cpu-loras", a->max_cpu_loras,
                 "adapters kept loaded (least recently used evicted)")->capture_default_str();
  app.add_option("--generation-config", a->generation_config,
                 "sampling defaults for requests that set none: auto (the model folder's "
                 "generation_config.json, as vLLM), vllm (none), or a folder holding one")
      ->capture_default_str();
  app.add_option("--override-generation-config", a->override_generation_config,
                 "JSON object laid over those defaults (temperature, top_p, top_k, min_p, "
                 "repetition_penalty, max_new_tokens: the last caps every request)");
  app.add_option("--chat-template", a->chat_template,
                 "a Jinja chat template (a file, or the template itself) used instead of the "
                 "model folder's");
  app.add_option("--max-cpu-lora-memory", a->max_cpu_lora_memory,
                 "memory the loaded adapters may take together, e.g. 4GiB (least recently used "
                 "evicted; an adapter larger than this alone is refused; default: no limit)");
  app.add_option("--max-lora-names", a->max_lora_names,
                 "adapter names the server keeps (--lora, loaded, and found in --lora-dir); past "
                 "it a new name is refused, after forgetting --lora-dir names not in memory")
      ->capture_default_str();
  app.add_option("--merge", a->merge, "serve the --lora adapter NAME folded into the base weights");
  app.add_option("--max-num-seqs", a->max_num_seqs, "sequences running at once")->capture_default_str();
  app.add_option("--max-num-batched-tokens", a->max_num_batched_tokens,
                 "token rows per step (prefill is chunked to fit)")->capture_default_str();
  app.add_option("--target-step-ms", a->target_step_ms,
                 "while sequences decode, prefill chunks are sized (from measured step times) so a "
                 "step takes about this long: the inter-token latency a new prompt causes "
                 "(0 = chunk by --max-num-batched-tokens alone)")->capture_default_str();
  app.add_option("--max-model-len", a->max_model_len,
                 "longest prompt + output (default: the model's max_position_embeddings)");
  app.add_option("--kv-cache-memory", a->kv_cache_memory, "KV cache size, e.g. 2GiB")->capture_default_str();
  app.add_option("--host", a->host, "address to listen on")->capture_default_str();
  app.add_option("--port", a->port, "port (0 = any free one)")->capture_default_str();
  app.add_option("--api-key", a->api_key,
                 "require Authorization: Bearer KEY on /v1 routes, /tokenize and /detokenize")
      ->envname("LOOM_API_KEY");
  // vLLM serves adapters only with --enable-lora; loom always does. Accepted so a vLLM command
  // line runs unchanged.
  app.add_flag("--enable-lora", a->enable_lora,
               "accepted for vLLM's command lines: adapters are always enabled");
  // vLLM's /load reports 0 unless this is given; loom's always counts. Accepted so a vLLM command
  // line runs unchanged.
  app.add_flag("--enable-server-load-tracking", a->enable_server_load_tracking,
               "accepted for vLLM's command lines: GET /load always counts requests in flight");
  app.add_flag("--return-tokens-as-token-ids", a->return_tokens_as_token_ids,
               "log-prob entries name tokens \"token_id:N\" unless a request's "
               "return_tokens_as_token_ids says otherwise (vLLM's flag)");
  app.add_flag("--allow-runtime-lora", a->allow_runtime_lora,
               "enable /v1/load_lora_adapter and /v1/unload_lora_adapter (paths under --lora-dir)");
  app.add_option("--http-threads", a->http_threads,
                 "threads that parse, render templates, tokenize and load adapters (connections "
                 "and streams hold none)")->capture_default_str();
  app.add_option("--request-timeout", a->request_timeout_s,
                 "seconds for a request's headers and body to arrive, and for an idle kept-alive "
                 "connection's next request (then the connection is closed)")->capture_default_str();
  app.add_option("--max-connections", a->max_connections,
                 "open HTTP connections (beyond, 503 and close)")->capture_default_str();
  app.add_option("--max-waiting", a->max_waiting,
                 "queued (not yet running) sequences beyond which requests get 503")->capture_default_str();
  app.add_option("--max-body", a->max_body, "largest request body (413 above)")->capture_default_str();
  app.add_flag("--no-enable-prefix-caching", a->no_prefix_caching,
               "do not reuse the KV blocks of earlier prompts (same adapter, same prefix)");
  app.add_flag("--no-batch-invariant", a->no_batch_invariant,
               "let kernels depend on the batch size (f32 kernel for small decode batches): faster "
               "decode on CPUs without AMX, but a request's log-probs may differ in the last bits "
               "with what runs beside it");
  app.add_option("--shutdown-timeout", a->shutdown_timeout_s,
                 "seconds SIGTERM waits for running requests before aborting them")->capture_default_str();
}

StatusOr<std::string> ChatTemplateFromFlag(const std::string& value) {
  // A long inline template is no path at all (stat: ENAMETOOLONG): not an error then.
  auto is_file = RegularFileExists(value, "--chat-template");
  if (is_file.ok() && *is_file)
    return ReadFileBounded(value, kMaxConfigFileBytes, "--chat-template");
  if (value.find_first_of("{}\n") != std::string::npos) {
    if (value.size() > kMaxConfigFileBytes) return InvalidArgument("--chat-template: too long");
    return value;
  }
  if (!is_file.ok()) return is_file.status();
  return InvalidArgument("--chat-template " + PrintableAscii(value.substr(0, 200)) +
                         ": looks like a file path, but there is no such file");
}

StatusOr<uint64_t> ParseBytes(const std::string& text, const std::string& flag) {
  size_t used = 0;
  double v = 0;
  // Decimal only: stod would read "0x10" as 16 bytes and "inf" or "nan" as numbers.
  if (text.empty() || !(std::isdigit(static_cast<unsigned char>(text[0])) || text[0] == '.') ||
      text.find_first_of("xXpP") != std::string::npos) {
    return InvalidArgument(flag + ": '" + text + "' is not a size (e.g. 2GiB, 512MiB)");
  }
  try {
    v = std::stod(text, &used);
  } catch (const std::exception&) {
    return InvalidArgument(flag + ": '" + text + "' is not a size (e.g. 2GiB, 512MiB)");
  }
  const std::string unit = text.substr(used);
  double mult = 1;
  if (unit == "" || unit == "B") {
    mult = 1;
  } else if (unit == "KiB" || unit == "K") {
    mult = 1024.0;
  } else if (unit == "MiB" || unit == "M") {
    mult = 1024.0 * 1024;
  } else if (unit == "GiB" || unit == "G") {
    mult = 1024.0 * 1024 * 1024;
  } else if (unit == "KB") {
    mult = 1e3;
  } else if (unit == "MB") {
    mult = 1e6;
  } else if (unit == "GB") {
    mult = 1e9;
  } else {
    return InvalidArgument(flag + ": unknown unit '" + unit + "' (B, KiB, MiB, GiB, KB, MB, GB)");
  }
  const double bytes = v * mult;
  if (!std::isfinite(bytes) || bytes < 1 || bytes > 1e15) {  // 0.5 truncated to 0 bytes before
    return InvalidArgument(flag + ": '" + text + "' is out of range (1 byte to 1e15)");
  }
  return static_cast<uint64_t>(bytes);
}

namespace {

StatusOr<std::pair<std::string, std::string>> ParseLoraSpec(const std::string& spec) {
  if (!spec.empty() && spec.front() == '{') {
    // A key given twice ({"name":"j",…,"name":"k"}) served the last one without a word.
    std::vector<std::set<std::string>> keys;
    std::string twice;
    auto no_duplicates = [&](int /*depth*/, nlohmann::json::parse_event_t event,
                             nlohmann::json& parsed) {
      if (event == nlohmann::json::parse_event_t::object_start) keys.emplace_back();
      if (event == nlohmann::json::parse_event_t::object_end && !keys.empty()) keys.pop_back();
      if (event == nlohmann::json::parse_event_t::key && !keys.empty() &&
          !keys.back().insert(parsed.get<std::string>()).second && twice.empty()) {
        twice = parsed.get<std::string>();
      }
      return true;
    };
    nlohmann::json j = nlohmann::json::parse(spec, no_duplicates, false);
    if (!twice.empty()) {
      return InvalidArgument("--lora '" + PrintableAscii(spec.substr(0, 200)) + "': field '" +
                             PrintableAscii(twice.substr(0, 60)) + "' given twice");
    }
    if (j.is_discarded() || !j.is_object() || !j.contains("name") || !j["name"].is_string() ||
        !j.contains("path") || !j["path"].is_string()) {
      return InvalidArgument("--lora '" + spec + "': expected {\"name\": ..., \"path\": ...}");
    }
    for (auto it = j.begin(); it != j.end(); ++it) {
      if (it.key() != "name" && it.key() != "path" && it.key() != "base_model_name") {
        return InvalidArgument("--lora: unknown field '" + it.key() + "'");
      }
    }
    // vLLM's LoRAModulePath field: a string (or null), as the load endpoint checks it; loom
    // serves one base, whose name is every adapter's parent (docs/API.md).
    if (j.contains("base_model_name") && !j["base_model_name"].is_null() &&
        !j["base_model_name"].is_string()) {
      return InvalidArgument("--lora '" + PrintableAscii(spec.substr(0, 200)) +
                             "': base_model_name must be a string");
    }
    return std::make_pair(j["name"].get<std::string>(), j["path"].get<std::string>());
  }
  ASSIGN_OR_RETURN(const LoraSpec split, ParseLoraNameAndDir(spec));
  return std::make_pair(split.name, split.dir);
}

}  // namespace

StatusOr<ServePlan> PlanServe(const ServeArgs& a) {
  ServePlan plan;
  auto positive = [](int v, const char* flag, int max) -> Status {
    if (v < 1 || v > max) {
      return InvalidArgument(std::string(flag) + " must be in [1, " + std::to_string(max) + "], got " +
                             std::to_string(v));
    }
    return OkStatus();
  };
  RETURN_IF_ERROR(positive(a.max_num_seqs, "--max-num-seqs", 4096));
  RETURN_IF_ERROR(positive(a.max_num_batched_tokens, "--max-num-batched-tokens", 1 << 16));
  if (a.max_num_batched_tokens < a.max_num_seqs) {
    // vLLM's rule: a step must have room for a decode row of every running sequence (with fewer,
    // the youngest running sequences got no row while the oldest ones decoded).
    return InvalidArgument("--max-num-batched-tokens (" + std::to_string(a.max_num_batched_tokens) +
                           ") must be at least --max-num-seqs (" + std::to_string(a.max_num_seqs) + ")");
  }
  RETURN_IF_ERROR(positive(a.max_loras, "--max-loras", 1024));
  RETURN_IF_ERROR(positive(a.http_threads, "--http-threads", 1024));
  RETURN_IF_ERROR(positive(a.max_connections, "--max-connections", 1 << 20));
  if (!(a.request_timeout_s >= 0.1 && a.request_timeout_s <= 3600)) {
    return InvalidArgument("--request-timeout must be in [0.1, 3600] seconds, got " +
                           std::to_string(a.request_timeout_s));
  }
  RETURN_IF_ERROR(positive(a.max_waiting, "--max-waiting", 1 << 20));
  if (a.max_cpu_loras < 0) return InvalidArgument("--max-cpu-loras must be ≥ 0 (0 = no limit)");
  RETURN_IF_ERROR(positive(a.max_lora_names, "--max-lora-names", 1 << 20));
  if (a.max_lora_rank < 0) return InvalidArgument("--max-lora-rank must be ≥ 0 (0 = any)");
  if (a.max_model_len < 0) return InvalidArgument("--max-model-len must be ≥ 0");
  RETURN_IF_ERROR(ValidateTargetStepMs(a.target_step_ms, "--target-step-ms"));
  if (a.port < 0 || a.port > 65535) return InvalidArgument("--port must be in [0, 65535]");
  if (!(a.shutdown_timeout_s >= 0 && a.shutdown_timeout_s <= 3600)) {
    return InvalidArgument("--shutdown-timeout must be in [0, 3600] seconds");
  }
  ASSIGN_OR_RETURN(ModelConfig config, LoadModelConfig(a.model));

  for (const auto& spec : a.loras) {
    ASSIGN_OR_RETURN(auto named, ParseLoraSpec(spec));
    // Checked here, before the port is bound and the model loaded (minutes on a large one).
    if (Status name = AdapterStore::CheckName(named.first); !name.ok()) {
      return InvalidArgument("--lora '" + spec + "': " + name.message());
    }
    std::error_code dir_ec;
    if (!fs::is_directory(named.second, dir_ec)) {
      return InvalidArgument("--lora '" + spec + "': " + named.second +
                             (fs::exists(named.second, dir_ec) ? " is not a folder" : " does not exist"));
    }
    for (const auto& [n, d] : plan.loras) {
      if (n == named.first) return InvalidArgument("--lora: adapter name '" + n + "' given twice");
    }
    plan.loras.push_back(std::move(named));
  }
  std::vector<std::string> served = a.served_model_names;
  if (served.empty()) {
    std::string name = FolderName(a.model);  // "--model ." served the name "." before
    served.push_back(name);
  }
  for (size_t i = 0; i < served.size(); ++i) {
    for (size_t j = 0; j < i; ++j) {
      if (served[i] == served[j]) {
        return InvalidArgument("--served-model-name: '" + served[i] + "' given twice");
      }
    }
  }
  for (const auto& [n, d] : plan.loras) {
    if (std::find(served.begin(), served.end(), n) != served.end()) {
      return InvalidArgument("--lora: adapter name '" + n + "' is the base model's name");
    }
  }
  if (plan.loras.size() > static_cast<size_t>(a.max_lora_names)) {
    return InvalidArgument("--lora: " + std::to_string(plan.loras.size()) +
                           " adapters given, more than --max-lora-names (" +
                           std::to_string(a.max_lora_names) + ")");
  }
  if (!a.merge.empty()) {
    if (plan.loras.size() != 1 || plan.loras.front().first != a.merge) {
      return InvalidArgument("--merge " + a.merge +
                             ": give exactly one --lora, named " + a.merge +
                             " (other adapters cannot run on merged weights)");
    }
    if (!a.lora_dirs.empty() || a.allow_runtime_lora) {
      return InvalidArgument("--merge cannot be combined with --lora-dir or --allow-runtime-lora");
    }
    plan.merge = a.merge;
  }
  for (const auto& d : a.lora_dirs) {
    std::error_code ec;
    if (!fs::is_directory(d, ec)) return InvalidArgument("--lora-dir " + d + " is not a folder");
  }

  // KV cache: K and V of every layer, per token, in --kv-cache-dtype.
  plan.engine.kv_cache_dtype = KvCacheDtypeFor(config);
  const int max_model_len = a.max_model_len > 0 ? a.max_model_len : config.max_position_embeddings;
  if (a.max_model_len > config.max_position_embeddings) {
    return InvalidArgument("--max-model-len " + std::to_string(a.max_model_len) +
                           " exceeds the model's max_position_embeddings " +
                           std::to_string(config.max_position_embeddings));
  }
  const uint64_t per_token = uint64_t{2} * static_cast<uint64_t>(config.num_layers) *
                             static_cast<uint64_t>(config.num_kv_heads) *
                             static_cast<uint64_t>(config.head_dim) *
                             static_cast<uint64_t>(KvDtypeSize(plan.engine.kv_cache_dtype));
  ASSIGN_OR_RETURN(uint64_t kv_bytes, ParseBytes(a.kv_cache_memory, "--kv-cache-memory"));
  const uint64_t wanted = static_cast<uint64_t>(a.max_num_seqs) * static_cast<uint64_t>(max_model_len);
  uint64_t tokens = std::min<uint64_t>(kv_bytes / std::max<uint64_t>(per_token, 1), wanted);
  tokens = std::min<uint64_t>(tokens, uint64_t{1} << 26);
  if (tokens < static_cast<uint64_t>(max_model_len)) {
    return InvalidArgument("--kv-cache-memory " + a.kv_cache_memory + " holds " +
                           std::to_string(tokens) + " tokens, fewer than --max-model-len " +
                           std::to_string(max_model_len) + " (" + std::to_string(per_token) +
                           " bytes per token)");
  }
  plan.engine.kv_cache_tokens = static_cast<int>(tokens);
  plan.engine.max_batch_tokens = a.max_num_batched_tokens;
  plan.engine.target_step_ms = a.target_step_ms;
  plan.engine.max_num_seqs = a.max_num_seqs;
  plan.engine.max_model_len = max_model_len;
  plan.engine.max_loras = a.max_loras;
  plan.engine.enable_prefix_caching = !a.no_prefix_caching;

  plan.store.max_cpu_loras = a.max_cpu_loras;
  plan.store.max_cpu_overshoot = a.max_loras;
  if (!a.max_cpu_lora_memory.empty()) {
    ASSIGN_OR_RETURN(plan.store.max_cpu_bytes, ParseBytes(a.max_cpu_lora_memory, "--max-cpu-lora-memory"));
  }
  plan.store.max_lora_rank = a.max_lora_rank;
  plan.store.max_names = a.max_lora_names;
  // Three quarters of the handler threads at most (and one fewer than all) load adapters or
  // wait for loads: the rest handle other requests.
  plan.store.max_load_threads =
      std::max(1, std::min(a.http_threads - 1, a.http_threads - a.http_threads / 4));
  plan.store.lora_dirs = a.lora_dirs;
  plan.store.model_dir = a.model;

  auto& s = plan.server;
  s.http.host = a.host;
  s.http.port = a.port;
  s.api_key = a.api_key;
  s.served_model_names = served;
  s.model_dir = a.model;
  s.merged_adapter = a.merge;
  s.allow_runtime_lora = a.allow_runtime_lora;
  s.return_tokens_as_token_ids = a.return_tokens_as_token_ids;
  if (!a.chat_template.empty()) {
    ASSIGN_OR_RETURN(plan.chat_template, ChatTemplateFromFlag(a.chat_template));
  }
  ASSIGN_OR_RETURN(s.generation_defaults, LoadGenerationDefaults(a.generation_config, a.model,
                                                                 a.override_generation_config));
  s.http.worker_threads = a.http_threads;
  s.http.max_connections = a.max_connections;
  s.http.request_timeout_s = a.request_timeout_s;
  s.max_waiting = a.max_waiting;
  ASSIGN_OR_RETURN(uint64_t body, ParseBytes(a.max_body, "--max-body"));
  // A JSON body past a few GiB is no request; a bound keeps the product of it and the
  // connection count an operator's deliberate choice.
  if (body > (uint64_t{4} << 30)) {
    return InvalidArgument("--max-body: '" + a.max_body + "' is above the largest accepted, 4GiB");
  }
  s.http.max_body_bytes = static_cast<size_t>(body);
  return plan;
}

}  // namespace loom::cli
