// `loom chat`: an interactive terminal chat through the model's chat template, one adapter or
// none, tokens printed as they come. Lines from stdin; /reset clears the history, /exit ends.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <string>

#include "cli/commands.h"
#include "cli/lora_cli.h"
#include "engine/engine.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace loom::cli {

namespace {

struct ChatArgs {
  std::string model;
  std::string tokenizer_mode = "auto";
  std::string lora;
  std::string system;
  SamplingParams params;
  int64_t seed = -1;
  int max_model_len = 0;  // 0: the model's max_position_embeddings, at most kChatDefaultMaxLen
  bool no_check_weights = false;
};

// The default conversation length: a 128k-context model's whole window would size the KV cache
// (f32 K and V of every layer) at tens of GiB.
constexpr int kChatDefaultMaxLen = 32768;

int Fail(const std::string& message, int code = 1) {
  std::fprintf(stderr, "error: %s\n", message.c_str());
  return code;
}

// --lora NAME of one of the demo model's adapters, or DIR / NAME=DIR.
std::string ResolveLora(const std::string& model_dir, const std::string& lora) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (lora.empty() || !SplitLoraSpec(lora).name.empty() || fs::exists(lora, ec)) return lora;
  const fs::path bundled = fs::path(model_dir) / "adapters" / lora;
  if (fs::is_regular_file(bundled / "adapter_config.json", ec)) {
    // A name with a '/' (a bundled sub-folder) is no adapter name: the folder alone.
    return lora.find('/') == std::string::npos ? lora + "=" + bundled.string() : bundled.string();
  }
  return lora;
}

int RunChat(ChatArgs& a) {
  if (a.model.empty()) {
    a.model = FindDemoModelDir();
    if (a.model.empty()) return Fail("no --model given and the bundled demo model (models/demo) was not found", 2);
  }
  if (a.params.logprobs > 0) return Fail("--logprobs is not shown by chat (use generate --output json)", 2);
  if (a.seed >= 0) a.params.seed = static_cast<uint64_t>(a.seed);
  // The flags are checked once, before the model loads (a bad one used to be reported on every
  // turn, and the command still exited 0).
  if (Status st = a.params.Validate(INT32_MAX); !st.ok()) return Fail(WithSamplingFlag(st.message()), 2);
  auto model = Model::Load(a.model, LoadOptionsFromFlags(a.no_check_weights));
  if (!model.ok()) return Fail(model.status().message());
  const int mpe = (*model)->config().max_position_embeddings;
  if (a.max_model_len > mpe) {
    return Fail("--max-model-len " + std::to_string(a.max_model_len) +
                    " exceeds the model's max_position_embeddings " + std::to_string(mpe),
                2);
  }
  const int max_model_len = a.max_model_len > 0 ? a.max_model_len : std::min(mpe, kChatDefaultMaxLen);
  if (Status st = (*model)->CheckKvCacheTokens(max_model_len, KvCacheDtypeFor((*model)->config()));
      !st.ok()) {
    return Fail("--max-model-len " + std::to_string(max_model_len) + ": " + st.message(), 2);
  }
  if (Status st = (*model)->CheckStepMemory(EngineOptions().max_batch_tokens, max_model_len); !st.ok()) {
    return Fail(st.message(), 2);
  }
  auto tok = tokenizer::Tokenizer::FromModelDir(
      a.model, *tokenizer::ParseTokenizerMode(a.tokenizer_mode));
  if (!tok.ok()) return Fail(tok.status().message());
  auto source = LoadChatTemplate(a.model, "", false);
  if (!source.ok()) return Fail(source.status().message());
  auto tmpl = ChatTemplate::Parse(*source);
  if (!tmpl.ok()) return Fail("chat template of " + a.model + ": " + tmpl.status().message());
  std::vector<std::string> specs;
  if (!a.lora.empty()) specs.push_back(ResolveLora(a.model, a.lora));
  auto adapters = LoadCliAdapters(**model, specs, 0, !a.no_check_weights);
  if (!adapters.ok()) return Fail(adapters.status().message());

  EngineOptions options;
  options.kv_cache_tokens = max_model_len;
  options.kv_cache_dtype = KvCacheDtypeFor((*model)->config());
  options.max_model_len = max_model_len;
  Engine engine(model->get(), options, tok->get());
  engine.set_emit_updates(true);
  const int slot = adapters->empty() ? -1 : engine.AddAdapter(adapters->front());
  ChatTemplateOptions render;
  render.add_generation_prompt = true;
  render.special_tokens = (*tok)->config().special_tokens;

  const bool interactive = isatty(STDIN_FILENO);
  int failed_turns = 0;  // piped input only
  std::fprintf(stderr, "loom chat: %s%s%s — /reset clears the conversation, /exit (or Ctrl-D) ends\n",
               a.model.c_str(), adapters->empty() ? "" : " + adapter ",
               adapters->empty() ? "" : adapters->front()->name().c_str());
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  if (!a.system.empty()) messages.push_back({{"role", "system"}, {"content", a.system}});
  const size_t first_turn = messages.size();
  std::string line;
  while (true) {
    if (interactive) std::fprintf(stderr, "\nyou> ");
    if (!std::getline(std::cin, line)) break;
    if (line == "/exit" || line == "/quit") break;
    if (line == "/reset") {
      messages.erase(messages.begin() + static_cast<std::ptrdiff_t>(first_turn), messages.end());
      std::fprintf(stderr, "(conversation cleared)\n");
      continue;
    }
    if (line.empty()) continue;
    messages.push_back({{"role", "user"}, {"content", line}});
    auto text = tmpl->Render(messages, render);
    StatusOr<std::vector<int32_t>> ids = text.ok() ? (*tok)->Encode(*text, false)
                                                   : StatusOr<std::vector<int32_t>>(text.status());
    GenerationRequest request;
    if (ids.ok()) {
      request.prompt = std::move(ids).value();
      request.params = a.params;
      const int64_t room = int64_t{engine.max_model_len()} - static_cast<int64_t>(request.prompt.size());
      request.params.max_tokens = static_cast<int>(std::min<int64_t>(a.params.max_tokens, room));
      request.detokenize = true;
      request.adapter_slot = slot;
    }
    auto id = ids.ok() ? (request.params.max_tokens >= 1
                              ? engine.Add(request)
                              : StatusOr<int64_t>(InvalidArgument(
                                    "the conversation fills the context; /reset to start over")))
                       : StatusOr<int64_t>(ids.status());
    if (!id.ok()) {
      std::fprintf(stderr, "error: %s\n", id.status().message().c_str());
      messages.erase(messages.end() - 1);
      failed_turns += interactive ? 0 : 1;  // piped: the exit status says a turn failed
      continue;
    }
    if (interactive) std::fprintf(stderr, "%s> ", adapters->empty() ? "loom" : adapters->front()->name().c_str());
    std::string answer;
    bool done = false;
    const auto t0 = std::chrono::steady_clock::now();
    int tokens = 0;
    while (!done && engine.Step()) {
      for (const SequenceUpdate& u : engine.TakeUpdates()) {
        tokens += u.has_token;
        std::fwrite(u.text.data(), 1, u.text.size(), stdout);
        answer += u.text;
        if (u.finish_reason != FinishReason::kNone) {
          done = true;
          if (!u.error.empty()) {
            std::fprintf(stderr, "\nerror: %s", u.error.c_str());
            failed_turns += interactive ? 0 : 1;
          }
        }
      }
      std::fflush(stdout);
    }
    engine.TakeFinished();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("\n");
    std::fflush(stdout);
    if (interactive) std::fprintf(stderr, "(%d tokens, %.1f tokens/s)\n", tokens, tokens / s);
    messages.push_back({{"role", "assistant"}, {"content", answer}});
  }
  if (failed_turns > 0) {  // a script reading answers from a pipe learns that some failed
    std::fprintf(stderr, "error: %d turn(s) failed\n", failed_turns);
    return 1;
  }
  return 0;
}

}  // namespace

RunFn AddChatCommand(CLI::App& cmd) {
  auto a = std::make_shared<ChatArgs>();
  a->params.temperature = 0;  // greedy unless asked: the same question gives the same answer
  a->params.max_tokens = 256;
  cmd.add_option("--model", a->model, "Hugging Face model folder (default: the bundled demo model)");
  cmd.add_option("--tokenizer-mode", a->tokenizer_mode,
                 "how the tokenizer is built: auto (as transformers 5's AutoTokenizer) or "
                 "tokenizers (tokenizer.json exactly as the tokenizers library reads it)")
      ->check(CLI::IsMember({"auto", "tokenizers"}));
  cmd.add_option("--lora", a->lora,
                 "one PEFT adapter: DIR, NAME=DIR, or the name of a bundled demo adapter");
  cmd.add_option("--system", a->system, "a system message starting the conversation");
  AddSamplingFlags(&cmd, &a->params, &a->seed);
  cmd.add_option("--max-model-len", a->max_model_len,
                 "longest conversation in tokens (default: the model's context, at most 32768)")
      ->check(CLI::Range(1, INT32_MAX));
  AddNoCheckWeightsFlag(&cmd, &a->no_check_weights);
  return [a] { return RunChat(*a); };
}

}  // namespace loom::cli
