// `loom quantize` (write a compressed-tensors checkpoint) and `loom perplexity` (score a text file).
#include <chrono>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "base/file.h"
#include "base/interrupt.h"
#include "base/output_file.h"
#include "base/json.h"
#include "cli/commands.h"
#include "cli/lora_cli.h"
#include "engine/perplexity.h"
#include "model/ct_checkpoint.h"
#include "tokenizer/tokenizer.h"

namespace loom::cli {

namespace {

struct QuantizeArgs {
  std::string model;
  std::string out;
  std::string scheme;
  int group = 128;
  bool head = false;
  uint64_t max_shard_bytes = 2ull << 30;
  bool no_check_weights = false;
};

int RunQuantize(const QuantizeArgs& a) {
  QuantizeCheckpointOptions o;
  o.scheme = a.scheme == "int4" ? LoadOptions::Quantization::kInt4 : LoadOptions::Quantization::kInt8;
  o.group = a.group;
  o.quantize_head = a.head;
  o.max_shard_bytes = a.max_shard_bytes;
  if (a.max_shard_bytes == 0) {
    std::fprintf(stderr, "error: --max-shard-size must be positive\n");
    return 2;
  }
  if (a.group != 128 && a.scheme != "int4") {
    std::fprintf(stderr, "error: --group-size %d applies to --scheme int4 only\n", a.group);
    return 2;
  }
  if (Status st = RejectGlobalQuantizeFlags("loom quantize"); !st.ok()) {
    std::fprintf(stderr, "error: %s\n", st.message().c_str());
    return 2;
  }
  auto t0 = std::chrono::steady_clock::now();
  std::string departures;
  Status st = WriteQuantizedCheckpoint(a.model, o, a.out, !a.no_check_weights, &departures);
  // A signal noted during the write (its folder then removed, or one that came after the last
  // check, the checkpoint complete) ends the command as the signal would have.
  if (!st.ok()) std::fprintf(stderr, "error: %s\n", st.message().c_str());
  RaiseNotedSignal();
  if (!st.ok()) {
    return st.code() == StatusCode::kInvalidArgument || st.code() == StatusCode::kFailedPrecondition ? 2 : 1;
  }
  // The groups as written: a projection --group-size does not divide takes another (and one
  // a group of 32 does not fit stays dense), said here too ("int4 group 128" was printed when
  // every projection had group 64).
  const std::string scheme =
      a.scheme == "int4" ? "int4 group " + std::to_string(a.group) : "int8 per channel";
  const std::string written = departures.empty() ? scheme : scheme + "; " + departures;
  std::fprintf(stderr, "wrote %s (compressed-tensors %s, %s%s) in %.2f s; peak RSS %.0f MiB\n",
               a.out.c_str(), a.scheme == "int4" ? "pack-quantized W4A16" : "int-quantized W8A8",
               written.c_str(), a.head ? ", --quantize-head" : ", lm_head dense",
               std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
               PeakRssMiB());
  return 0;
}

struct PerplexityArgs {
  std::string model;
  std::string text;
  std::string lora;
  int ctx = 512;
  std::string per_token;
  bool json_out = false;
  bool no_check_weights = false;
};

int RunPerplexity(const PerplexityArgs& a) {
  auto fail = [](const Status& st, int code) {
    std::fprintf(stderr, "error: %s\n", st.message().c_str());
    return code;
  };
  std::string per_token;  // resolved before any work: never one of the inputs
  if (!a.per_token.empty()) {
    auto out = CheckOutputFile(a.per_token, "--per-token",
                               {{"--model", a.model}, {"--text", a.text}, {"--lora", LoraFolder(a.lora)}});
    if (!out.ok()) return fail(out.status(), 2);
    per_token = *out;
  }
  auto text = ReadFileBounded(a.text, kMaxRequestFileBytes);
  if (!text.ok()) return fail(text.status(), 2);
  auto tok = tokenizer::Tokenizer::FromModelDir(a.model, tokenizer::TokenizerMode::kAuto);
  if (!tok.ok()) return fail(tok.status(), 1);
  // As transformers' tokenizer(text): special tokens added (a BOS where the model has one).
  auto ids = (*tok)->Encode(*text, /*add_special_tokens=*/true);
  if (!ids.ok()) return fail(InvalidArgument("--text " + a.text + ": " + ids.status().message()), 2);
  const LoadOptions load = LoadOptionsFromFlags(a.no_check_weights);
  auto model = Model::Load(a.model, load);
  if (!model.ok()) return fail(model.status(), 1);
  std::shared_ptr<const Adapter> adapter;
  if (!a.lora.empty()) {
    auto adapters = LoadCliAdapters(**model, {a.lora}, 0, !a.no_check_weights);
    if (!adapters.ok()) return fail(adapters.status(), 1);
    adapter = adapters->front();
  }
  auto t0 = std::chrono::steady_clock::now();
  auto r =
      ComputePerplexity(model->get(), *ids, a.ctx, adapter, KvCacheDtypeFor((*model)->config()));
  if (!r.ok()) return fail(r.status(), 2);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!per_token.empty()) {
    // One JSON list of every scored token's NLL (for comparing two runs token by token).
    Status st = ReplaceFileAtomically(per_token, JsonToString(nlohmann::json(r->token_nll)) + "\n",
                                      "--per-token");
    if (!st.ok()) return fail(st, 1);
  }
  std::string weights = (*model)->prequantized().empty() ? "file dtype" : (*model)->prequantized();
  if (load.quantize == LoadOptions::Quantization::kInt8) weights = "int8";
  if (load.quantize == LoadOptions::Quantization::kInt4) weights = "int4 g" + std::to_string(load.quantize_group);
  if (load.quantize == LoadOptions::Quantization::kNf4) weights = "bitsandbytes nf4";
  if (load.quantize == LoadOptions::Quantization::kFp4) weights = "bitsandbytes fp4";
  if (load.quantize != LoadOptions::Quantization::kNone && load.quantize_head) weights += " +head";
  // Projections the flag could not give its scheme (counted; the load's notes name them).
  if (!(*model)->quantize_departures().empty()) weights += " (" + (*model)->quantize_departures() + ")";
  if (a.json_out) {
    nlohmann::json j = {{"model", a.model},     {"text", a.text},
                        {"weights", weights},   {"adapter", a.lora.empty() ? nlohmann::json() : nlohmann::json(a.lora)},
                        {"ctx", a.ctx},         {"tokens", ids->size()},
                        {"predicted", r->predicted}, {"windows", r->windows},
                        {"nll_mean", r->nll_sum / static_cast<double>(r->predicted)},
                        {"perplexity", r->Perplexity()}};
    std::printf("%s\n", JsonToString(j, 2).c_str());
  } else {
    std::printf("perplexity %.4f (%s; %lld tokens scored in %lld windows of %d; mean NLL %.5f nats)\n",
                r->Perplexity(), weights.c_str(), static_cast<long long>(r->predicted),
                static_cast<long long>(r->windows), a.ctx, r->nll_sum / static_cast<double>(r->predicted));
  }
  std::fprintf(stderr, "read %zu tokens, scored %lld in %.2f s\n", ids->size(),
               static_cast<long long>(r->predicted), secs);
  return 0;
}

}  // namespace

RunFn AddQuantizeCommand(CLI::App& cmd) {
  auto a = std::make_shared<QuantizeArgs>();
  cmd.add_option("--model", a->model, "Hugging Face checkpoint folder (F32/F16/BF16)")->required();
  cmd.add_option("--out", a->out, "output folder: a new or empty folder, not inside --model")->required();
  cmd.add_option("--scheme", a->scheme,
                 "int8: compressed-tensors int-quantized W8A8 (per-channel int8 weights, dynamic "
                 "per-token int8 activations); int4: pack-quantized W4A16 (group-wise int4)")
      ->required()
      ->check(CLI::IsMember({"int8", "int4"}));
  cmd.add_option("--group-size", a->group, "int4: inputs per scale, 32 or 128")
      ->capture_default_str()
      ->check(CLI::IsMember({32, 128}));
  cmd.add_flag("--quantize-head", a->head, "quantize lm_head too (default: listed in ignore, kept dense)");
  cmd.add_option("--max-shard-size", a->max_shard_bytes, "bytes per safetensors shard")
      ->capture_default_str()
      ->check(DecimalInteger(UINT64_MAX));
  AddNoCheckWeightsFlag(&cmd, &a->no_check_weights);
  return [a] { return RunQuantize(*a); };
}

RunFn AddPerplexityCommand(CLI::App& cmd) {
  auto a = std::make_shared<PerplexityArgs>();
  cmd.add_option("--model", a->model, "Hugging Face checkpoint folder (with its tokenizer)")->required();
  cmd.add_option("--text", a->text, "UTF-8 text file to score")->required();
  cmd.add_option("--ctx", a->ctx, "tokens per window (windows do not overlap)")->capture_default_str();
  cmd.add_option("--lora", a->lora, "score with this PEFT adapter (NAME=DIR or DIR)");
  cmd.add_option("--per-token", a->per_token, "write every scored token's NLL (nats) as a JSON list to this file");
  cmd.add_flag("--json", a->json_out, "print JSON");
  AddNoCheckWeightsFlag(&cmd, &a->no_check_weights);
  return [a] { return RunPerplexity(*a); };
}

}  // namespace loom::cli
