// `loom generate`: one prompt through the engine; text (decoded when the folder has a
// tokenizer, else ids) or JSON out, speeds on stderr.
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "base/json.h"
#include "base/file.h"
#include "cli/commands.h"
#include "cli/lora_cli.h"
#include "engine/engine.h"
#include "tokenizer/tokenizer.h"

namespace loom::cli {

namespace {

struct GenerateArgs {
  std::string model;
  std::string tokenizer_mode = "auto";
  std::string prompt_tokens;
  std::string prompt_text;
  std::string chat;
  std::vector<std::string> loras;
  bool merge = false;
  std::string batch;
  int max_lora_rank = 0;
  std::string output = "text";
  SamplingParams params;
  int64_t seed = -1;
  bool no_check_weights = false;
};

int RunGenerate(GenerateArgs& a) {
  using Clock = std::chrono::steady_clock;
  std::vector<int32_t> prompt;
  std::string error;
  if (!a.prompt_text.empty() + !a.prompt_tokens.empty() + !a.chat.empty() + !a.batch.empty() != 1) {
    std::fprintf(stderr, "error: give exactly one of --prompt, --prompt-tokens, --chat or --batch\n");
    return 2;
  }
  if (a.params.logprobs > 0 && a.output == "text" && a.batch.empty()) {  // was printed nowhere
    std::fprintf(stderr, "error: --logprobs needs --output json (text output prints the text alone)\n");
    return 2;
  }
  if (a.merge && a.loras.size() != 1) {
    std::fprintf(stderr, "error: --merge folds exactly one --lora adapter into the weights\n");
    return 2;
  }
  if (!a.batch.empty() && a.merge) {
    std::fprintf(stderr, "error: --batch runs adapters unmerged; drop --merge\n");
    return 2;
  }
  if (a.seed >= 0) a.params.seed = static_cast<uint64_t>(a.seed);
  auto t0 = Clock::now();
  auto model = Model::Load(a.model, LoadOptionsFromFlags(a.no_check_weights));
  if (!model.ok()) {
    std::fprintf(stderr, "error: %s\n", model.status().message().c_str());
    return 1;
  }
  auto adapters = LoadCliAdapters(**model, a.loras, a.max_lora_rank, !a.no_check_weights);
  if (!adapters.ok()) {
    std::fprintf(stderr, "error: %s\n", adapters.status().message().c_str());
    return 1;
  }
  if (!a.batch.empty()) return RunBatchFile(model->get(), *adapters, a.batch, a.params);
  // The folder's tokenizer: needed for --prompt, used for the output text when present.
  std::unique_ptr<tokenizer::Tokenizer> tok;
  auto has_tokenizer = tokenizer::HasTokenizerFiles(a.model);
  if (!has_tokenizer.ok()) {
    std::fprintf(stderr, "error: %s\n", has_tokenizer.status().message().c_str());
    return 1;
  }
  if (!a.prompt_text.empty() || !a.chat.empty() || *has_tokenizer) {
    auto loaded = tokenizer::Tokenizer::FromModelDir(
        a.model, *tokenizer::ParseTokenizerMode(a.tokenizer_mode));
    if (!loaded.ok()) {
      std::fprintf(stderr, "error: %s\n", loaded.status().message().c_str());
      return 1;
    }
    tok = std::move(loaded).value();
  }
  if (!a.chat.empty()) {
    auto rendered = RenderChatFile(*tok, a.model, a.chat, /*add_generation_prompt=*/true);
    if (!rendered.ok()) {
      std::fprintf(stderr, "error: --chat: %s\n", rendered.status().message().c_str());
      return 2;
    }
    auto ids = tok->Encode(*rendered, /*add_special_tokens=*/false);
    if (!ids.ok()) {
      std::fprintf(stderr, "error: --chat: %s\n", ids.status().message().c_str());
      return 2;
    }
    prompt = std::move(ids).value();
  } else if (!a.prompt_text.empty()) {
    // Same as transformers' tokenizer(text): special tokens (BOS ...) added.
    auto ids = tok->Encode(a.prompt_text, /*add_special_tokens=*/true);
    if (!ids.ok()) {
      std::fprintf(stderr, "error: --prompt: %s\n", ids.status().message().c_str());
      return 2;
    }
    prompt = std::move(ids).value();
  } else if (!ParseIdList(a.prompt_tokens, &prompt, &error)) {
    std::fprintf(stderr, "error: --prompt-tokens: %s\n", error.c_str());
    return 2;
  }
  if (a.merge) {
    Status st = (*model)->MergeAdapter(*adapters->front());
    if (!st.ok()) {
      std::fprintf(stderr, "error: %s\n", st.message().c_str());
      return 1;
    }
  }
  auto t_loaded = Clock::now();
  // Validate before sizing anything from the request: the KV cache holds prompt + max_tokens.
  EngineOptions options;
  {
    Status st = ValidateRequestSize((*model)->config(), a.params, static_cast<int64_t>(prompt.size()));
    if (!st.ok()) {
      std::fprintf(stderr, "error: %s\n", WithSamplingFlag(st.message()).c_str());
      return 2;
    }
    st = (*model)->CheckKvCacheTokens(static_cast<int64_t>(prompt.size()) + a.params.max_tokens,
                                      KvCacheDtypeFor((*model)->config()));
    if (st.ok()) {
      st = (*model)->CheckStepMemory(options.max_batch_tokens,
                                     static_cast<int64_t>(prompt.size()) + a.params.max_tokens);
    }
    if (!st.ok()) {
      std::fprintf(stderr, "error: %s\n", st.message().c_str());
      return 2;
    }
  }
  options.kv_cache_tokens = std::max<int>(256, static_cast<int>(prompt.size()) + a.params.max_tokens);
  options.kv_cache_dtype = KvCacheDtypeFor((*model)->config());
  // The prompt in chunks of max_batch_tokens (512) rows, the same bits as one step: a step of the
  // whole prompt took working memory in proportion to it.
  Engine engine(model->get(), options);
  GenerationRequest request;
  request.prompt = prompt;
  request.params = a.params;
  if (!a.merge && !adapters->empty()) {
    if (adapters->size() > 1) {
      std::fprintf(stderr, "error: several --lora adapters need --batch to say which entry uses which\n");
      return 2;
    }
    request.adapter_slot = engine.AddAdapter(adapters->front());
  }
  auto id = engine.Add(request);
  if (!id.ok()) {
    std::fprintf(stderr, "error: %s\n", id.status().message().c_str());
    return 2;
  }
  auto t_start = Clock::now();
  engine.Step();  // the whole prompt (one chunk) and the first token
  auto t_first = Clock::now();
  auto results = engine.RunToCompletion();
  auto t_end = Clock::now();
  const GenerationResult& r = results.at(0);

  const double load_s = std::chrono::duration<double>(t_loaded - t0).count();
  const double prefill_s = std::chrono::duration<double>(t_first - t_start).count();
  const double decode_s = std::chrono::duration<double>(t_end - t_first).count();
  const size_t decoded = r.generated.size() > 0 ? r.generated.size() - 1 : 0;
  std::fprintf(stderr,
               "loaded in %.2f s; prefill %zu tokens at %.1f tokens/s; decode %zu tokens at %.1f "
               "tokens/s; peak RSS %.0f MiB\n",
               load_s, prompt.size(), prompt.size() / prefill_s, decoded,
               decoded > 0 ? decoded / decode_s : 0.0, PeakRssMiB());

  if (a.output == "json") {
    nlohmann::json j = ResultJson(r, a.params.logprobs);
    if (tok) j["text"] = tok->Decode(r.generated, /*skip_special_tokens=*/true);
    std::printf("%s\n", JsonToString(j).c_str());
  } else if (tok) {
    const std::string text = tok->Decode(r.generated, /*skip_special_tokens=*/true);
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::printf("\n");
  } else {
    for (size_t i = 0; i < r.generated.size(); ++i) {
      std::printf("%s%d", i ? " " : "", r.generated[i]);
    }
    std::printf("\n");
  }
  if (r.finish_reason == FinishReason::kError) {  // e.g. non-finite logits: what came before is printed
    std::fprintf(stderr, "error: %s\n", r.error.c_str());
    return 1;
  }
  return 0;
}

}  // namespace

RunFn AddGenerateCommand(CLI::App& cmd) {
  auto a = std::make_shared<GenerateArgs>();
  cmd.add_option("--model", a->model, "Hugging Face checkpoint folder")->required();
  cmd.add_option("--tokenizer-mode", a->tokenizer_mode,
                 "how the tokenizer is built: auto (as transformers 5's AutoTokenizer) or "
                 "tokenizers (tokenizer.json exactly as the tokenizers library reads it)")
      ->check(CLI::IsMember({"auto", "tokenizers"}));
  cmd.add_option("--prompt", a->prompt_text,
                 "prompt text, encoded with the folder's tokenizer (special tokens added)");
  cmd.add_option("--prompt-tokens", a->prompt_tokens, "prompt as token ids: 1,2,3");
  cmd.add_option("--chat", a->chat,
                 "file holding a JSON messages list, rendered with the model's chat template "
                 "(generation prompt added)");
  cmd.add_option("--lora", a->loras, "PEFT adapter: DIR or NAME=DIR (repeat with --batch)");
  cmd.add_flag("--merge", a->merge, "fold the --lora adapter into the weights (no LoRA path)");
  cmd.add_option("--batch", a->batch,
                 "JSON list of {prompt_tokens, adapter, max_tokens} run together as one batch");
  cmd.add_option("--max-lora-rank", a->max_lora_rank,
                 "reject adapters above this rank (0 = no limit)")
      ->check(CLI::Range(0, INT32_MAX));
  cmd.add_option("--output", a->output, "text | json")
      ->check(CLI::IsMember({"text", "json"}))
      ->capture_default_str();
  AddSamplingFlags(&cmd, &a->params, &a->seed);
  AddNoCheckWeightsFlag(&cmd, &a->no_check_weights);
  return [a] { return RunGenerate(*a); };
}

}  // namespace loom::cli
