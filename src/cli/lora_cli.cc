// Adapter commands: inspect (validate and describe), merge (write a merged checkpoint), batch runs.
#include "cli/lora_cli.h"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "base/file.h"
#include "base/interrupt.h"
#include "base/json.h"
#include "lora/adapter_store.h"
#include "lora/merge.h"
#include "model/merged_checkpoint.h"
#include "model/weight_memory.h"

namespace loom::cli {

namespace fs = std::filesystem;
using json = nlohmann::json;

LoraSpec SplitLoraSpec(const std::string& spec) {
  const size_t eq = spec.find('=');
  std::error_code ec;
  if (eq == std::string::npos || spec.substr(0, eq).find('/') != std::string::npos ||
      fs::exists(spec, ec)) {
    return {"", spec};
  }
  return {spec.substr(0, eq), spec.substr(eq + 1)};
}

std::string LoraFolder(const std::string& spec) { return SplitLoraSpec(spec).dir; }

std::string FolderName(const std::string& path) {
  std::error_code ec;
  fs::path p = fs::absolute(path, ec);
  if (ec) p = path;
  p = p.lexically_normal();
  std::string name = p.filename().string();
  return name.empty() ? p.parent_path().filename().string() : name;
}

StatusOr<LoraSpec> ParseLoraNameAndDir(const std::string& spec) {
  LoraSpec split = SplitLoraSpec(spec);
  std::error_code ec;
  if (split.name.empty() && !spec.empty() && spec.front() == '=' && !fs::exists(spec, ec)) {
    return InvalidArgument("--lora '" + spec +
                           "': no adapter name before '=' (NAME=DIR, or DIR alone)");
  }
  if (!split.name.empty() && split.dir.empty()) {
    return InvalidArgument("--lora '" + spec + "': no folder after '=' (NAME=DIR)");
  }
  if (split.name.empty()) split.name = FolderName(split.dir);
  return split;
}

StatusOr<std::vector<std::shared_ptr<const Adapter>>> LoadCliAdapters(
    const Model& model, const std::vector<std::string>& specs, int max_rank, bool check_weights,
    bool notes) {
  std::vector<std::shared_ptr<const Adapter>> out;
  for (const std::string& spec : specs) {
    ASSIGN_OR_RETURN(const LoraSpec split, ParseLoraNameAndDir(spec));
    const std::string& name = split.name;
    const std::string& dir = split.dir;
    // A name given (NAME=DIR) is one serve accepts (generate took "a b", which serve refuses); a
    // folder's own name ("lr=2e-4") is taken as it is.
    if (Status ok = AdapterStore::CheckName(name); !ok.ok() && !SplitLoraSpec(spec).name.empty()) {
      return InvalidArgument("--lora '" + spec + "': " + ok.message());
    }
    for (const auto& a : out) {
      if (a->name() == name) return InvalidArgument("--lora: adapter name '" + name + "' given twice");
    }
    ASSIGN_OR_RETURN(auto adapter,
                     LoadAdapter(name, dir, model.sites(), max_rank, check_weights));
    if (notes) NoteAdapterConfig(*adapter, model.dir());
    out.push_back(std::move(adapter));
  }
  return out;
}

json ResultJson(const GenerationResult& r, int logprobs) {
  json j;
  j["prompt_tokens"] = r.prompt;
  j["generated_tokens"] = r.generated;
  j["finish_reason"] = FinishReasonName(r.finish_reason);
  if (r.finish_reason == FinishReason::kError) j["error"] = r.error;
  if (logprobs > 0) {
    json steps = json::array();
    for (const auto& top : r.top_logprobs) {
      json step = json::array();
      for (const auto& t : top) step.push_back({{"token", t.token}, {"logprob", t.logprob}});
      steps.push_back(step);
    }
    j["logprobs"] = steps;
  }
  return j;
}

int RunBatchFile(Model* model, const std::vector<std::shared_ptr<const Adapter>>& adapters,
                 const std::string& batch_path, const SamplingParams& params) {
  auto fail = [](const Status& st) {
    std::fprintf(stderr, "error: --batch: %s\n", st.message().c_str());
    return 2;
  };
  auto text = ReadFileBounded(batch_path, kMaxRequestFileBytes);
  if (!text.ok()) return fail(text.status());
  std::map<std::string, int> slot_of;  // adapter name → its engine slot (= index)
  for (size_t i = 0; i < adapters.size(); ++i) slot_of[adapters[i]->name()] = static_cast<int>(i);
  int64_t total = 0;
  auto parsed = ParseBatchRequests(*text, batch_path, model->config(), slot_of, params, &total);
  if (!parsed.ok()) return fail(parsed.status());
  std::vector<BatchEntry>& entries = *parsed;
  if (Status st = model->CheckKvCacheTokens(total + 64, KvCacheDtypeFor(model->config())); !st.ok())
    return fail(st);
  EngineOptions options;
  if (Status st = model->CheckStepMemory(options.max_batch_tokens, total + 64); !st.ok()) return fail(st);
  options.kv_cache_tokens = static_cast<int>(std::max<int64_t>(1024, total + 64));
  options.kv_cache_dtype = KvCacheDtypeFor(model->config());
  Engine engine(model, options);
  for (const auto& a : adapters) engine.AddAdapter(a);  // slots in `adapters` order
  std::vector<int64_t> ids;
  std::vector<int> logprobs_of;  // per entry: its own "logprobs" or the flag's
  for (size_t i = 0; i < entries.size(); ++i) {
    logprobs_of.push_back(entries[i].request.params.logprobs);
    auto id = engine.Add(std::move(entries[i].request));
    if (!id.ok()) {
      std::fprintf(stderr, "error: --batch %s entry %zu: %s\n", batch_path.c_str(), i,
                   id.status().message().c_str());
      return 2;
    }
    ids.push_back(*id);
  }
  auto t0 = std::chrono::steady_clock::now();
  auto results = engine.RunToCompletion();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  json out = json::array();
  size_t generated = 0, failed = 0;
  for (int64_t id : ids) {
    for (const auto& r : results) {
      if (r.id != id) continue;
      json j = ResultJson(r, logprobs_of[out.size()]);
      j["adapter"] = entries[out.size()].adapter_field;
      if (r.finish_reason == FinishReason::kError) {
        std::fprintf(stderr, "error: --batch %s entry %zu: %s\n", batch_path.c_str(), out.size(),
                     r.error.c_str());
        ++failed;
      }
      out.push_back(j);
      generated += r.generated.size();
    }
  }
  std::fprintf(stderr, "%zu sequences, %zu tokens generated in %.2f s (%.1f tokens/s) in %lld steps\n",
               ids.size(), generated, secs, generated / secs, static_cast<long long>(engine.steps()));
  std::printf("%s\n", JsonToString(out).c_str());
  return failed > 0 ? 1 : 0;  // every entry's result is printed; a failed one fails the run
}

namespace {

// "weights": every projection (as served, after --quantize) and other tensor with its scheme,
// shape and bytes; "memory": tensors and bytes per scheme, and the total.
void AddWeightMemoryJson(const Model& model, json* j) {
  const std::vector<WeightMemory> weights = DescribeWeightMemory(model);
  json list = json::array();
  for (const WeightMemory& m : weights) {
    list.push_back({{"name", m.name}, {"scheme", m.scheme}, {"shape", m.shape}, {"bytes", m.bytes}});
  }
  json memory = json::object();
  for (const auto& [scheme, sum] : SumWeightMemory(weights)) {
    memory[scheme] = {{"tensors", sum.first}, {"bytes", sum.second}, {"MiB", sum.second / 1048576.0}};
  }
  (*j)["weights"] = list;
  (*j)["memory"] = memory;
}

struct InspectArgs {
  std::string model;
  std::string lora;
  int max_rank = 0;
  bool json_out = false;
  bool no_check_weights = false;
};

int RunInspect(const InspectArgs& a) {
  auto model = Model::Load(a.model, LoadOptionsFromFlags(a.no_check_weights));
  if (!model.ok()) {
    std::fprintf(stderr, "error: %s\n", model.status().message().c_str());
    return 1;
  }
  const ModelConfig& c = (*model)->config();
  json j = {{"model", a.model},
            {"architecture", c.architecture},
            {"layers", c.num_layers},
            {"model_dim", c.model_dim},
            {"vocab_size", c.vocab_size},
            {"weight_bytes", (*model)->weight_bytes()}};
  if (!(*model)->prequantized().empty()) {  // e.g. "compressed-tensors"
    j["prequantized"] = (*model)->prequantized();
    j["quantized_bytes"] = (*model)->quantized_bytes();
  }
  AddWeightMemoryJson(**model, &j);
  if (!a.lora.empty()) {
    auto t0 = std::chrono::steady_clock::now();
    auto adapters = LoadCliAdapters(**model, {a.lora}, a.max_rank, !a.no_check_weights, /*notes=*/false);
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (!adapters.ok()) {
      std::fprintf(stderr, "error: %s\n", adapters.status().message().c_str());
      return 1;
    }
    const Adapter& ad = *adapters->front();
    char hash[32];
    std::snprintf(hash, sizeof(hash), "%016llx", static_cast<unsigned long long>(ad.content_hash()));
    json modules = json::array();
    for (const LoraWeights* lw : ad.modules()) {
      modules.push_back({{"module", lw->module_path},
                         {"rank", lw->rank},
                         {"alpha", lw->alpha},
                         {"scale", lw->scale},
                         {"dtype", DTypeName(lw->a.dtype)},
                         {"dora", !lw->dora_gain.empty()},
                         {"lora_bias", !lw->bias.empty()},
                         {"bytes", lw->a.nbytes() + lw->b.nbytes()}});
    }
    if (const LoraEmbedding* e = ad.embedding()) {
      modules.push_back({{"module", "model.embed_tokens"},
                         {"rank", e->rank},
                         {"scale", e->scale},
                         {"embedding", true},
                         {"dora", !e->dora_gain.empty()}});
    }
    j["adapter"] = {{"name", ad.name()},
                    {"dir", ad.dir()},
                    {"content_hash", hash},
                    {"max_rank", ad.max_rank()},
                    {"use_rslora", ad.config().use_rslora},
                    {"use_dora", ad.config().use_dora},
                    {"tensor_bytes", ad.tensor_bytes()},
                    {"load_ms", ms},
                    {"ignored_config_keys", ad.config().ignored_keys},
                    {"modules", modules}};
    if (TrainedOnAnotherBase(ad.config(), a.model)) {
      j["adapter"]["warning"] = "base_model_name_or_path '" + ad.config().base_model_name_or_path +
                                "' differs from the served model's folder; shapes matched";
    }
    if (!a.json_out) {
      std::printf("adapter '%s' (%s) hash %s, %zu modules, %.1f KiB, loaded in %.1f ms\n",
                  ad.name().c_str(), ad.dir().c_str(), hash, modules.size(), ad.tensor_bytes() / 1024.0, ms);
      for (const auto& m : modules) {
        std::printf("  %-40s rank %-3d scale %-9.5g %s\n", m["module"].get<std::string>().c_str(),
                    m["rank"].get<int>(), m["scale"].get<double>(),
                    m.value("dora", false) ? "DoRA" : (m.value("embedding", false) ? "embedding" : ""));
      }
      if (j["adapter"].contains("warning")) {
        std::printf("warning: %s\n", j["adapter"]["warning"].get<std::string>().c_str());
      }
      return 0;
    }
  }
  std::printf("%s\n", JsonToString(j, 2).c_str());
  return 0;
}

struct MergeArgs {
  std::string model;
  std::string lora;
  std::string out;
  uint64_t max_shard_bytes = 2ull << 30;
  bool no_check_weights = false;
};

int RunMerge(const MergeArgs& a) {
  if (Status st = RejectGlobalQuantizeFlags("loom merge"); !st.ok()) {
    std::fprintf(stderr, "error: %s\n", st.message().c_str());
    return 2;
  }
  // The output rules first: nothing is loaded (or written) for an --out that would be refused.
  const std::string lora_dir = LoraFolder(a.lora);
  if (auto out = CheckMergeOutput(a.model, lora_dir, a.out); !out.ok()) {
    std::fprintf(stderr, "error: %s\n", out.status().message().c_str());
    return 2;
  }
  if (a.max_shard_bytes == 0) {
    std::fprintf(stderr, "error: --max-shard-size must be positive\n");
    return 2;
  }
  // config.json as the writer reads it when it unties the head (ordered, its limits): refused
  // now, not after the load and the merge.
  const std::string config_path = a.model + "/config.json";
  auto config_text = ReadFileBounded(config_path, kMaxConfigFileBytes);
  Status config_ok = config_text.status();
  if (config_ok.ok()) config_ok = ParseOrderedJson(*config_text, config_path).status();
  if (!config_ok.ok()) {
    std::fprintf(stderr, "error: %s\n", config_ok.message().c_str());
    return 2;
  }
  auto model = Model::Load(a.model, LoadOptionsFromFlags(a.no_check_weights));
  if (!model.ok()) {
    std::fprintf(stderr, "error: %s\n", model.status().message().c_str());
    return 1;
  }
  auto adapters = LoadCliAdapters(**model, {a.lora}, 0, !a.no_check_weights);
  if (!adapters.ok()) {
    std::fprintf(stderr, "error: %s\n", adapters.status().message().c_str());
    return 1;
  }
  const double rss_before = PeakRssMiB();
  auto t0 = std::chrono::steady_clock::now();
  Status st = WriteMergedCheckpoint(a.model, **model, *adapters->front(), a.out, a.max_shard_bytes);
  // A signal noted during the write (its folder then removed, or one that came after the last
  // check, the checkpoint complete) ends the command as the signal would have.
  if (!st.ok()) std::fprintf(stderr, "error: %s\n", st.message().c_str());
  RaiseNotedSignal();
  if (!st.ok()) {
    return 1;
  }
  std::fprintf(stderr, "merged '%s' into %s in %.2f s; peak RSS %.0f MiB (%.0f MiB before merging)\n",
               adapters->front()->name().c_str(), a.out.c_str(),
               std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
               PeakRssMiB(), rss_before);
  return 0;
}

}  // namespace

RunFn AddInspectCommand(CLI::App& cmd) {
  auto a = std::make_shared<InspectArgs>();
  cmd.add_option("--model", a->model, "Hugging Face checkpoint folder")->required();
  cmd.add_option("--lora", a->lora, "PEFT adapter folder (NAME=DIR or DIR)");
  cmd.add_option("--max-lora-rank", a->max_rank, "reject adapters above this rank (0 = no limit)")
      ->check(CLI::Range(0, INT32_MAX));
  cmd.add_flag("--json", a->json_out, "print JSON");
  AddNoCheckWeightsFlag(&cmd, &a->no_check_weights);
  return [a] { return RunInspect(*a); };
}

RunFn AddMergeCommand(CLI::App& cmd) {
  auto a = std::make_shared<MergeArgs>();
  cmd.add_option("--model", a->model, "Hugging Face checkpoint folder")->required();
  cmd.add_option("--lora", a->lora, "PEFT adapter folder")->required();
  cmd.add_option("--out", a->out, "output folder (a standard HF checkpoint)")->required();
  cmd.add_option("--max-shard-size", a->max_shard_bytes, "bytes per safetensors shard")
      ->capture_default_str()
      ->check(DecimalInteger(UINT64_MAX));
  AddNoCheckWeightsFlag(&cmd, &a->no_check_weights);
  return [a] { return RunMerge(*a); };
}

}  // namespace loom::cli
