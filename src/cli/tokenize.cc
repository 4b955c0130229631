// `loom tokenize` / `loom detokenize`: the model folder's tokenizer from the command line, and a
// --bench mode that times encoding (tools/bench/bench_tokenizer.py compares it with HF).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "base/file.h"
#include "base/json.h"
#include "cli/commands.h"
#include "tokenizer/tokenizer.h"

namespace loom::cli {

namespace {

struct TokenizeArgs {
  std::string model;
  std::string tokenizer_mode = "auto";
  std::string text;
  std::string file;
  std::string chat;
  bool add_generation_prompt = false;
  bool no_special = false;
  int bench = 0;
};

int RunBench(const tokenizer::Tokenizer& tok, const std::string& text, int iterations) {
  using Clock = std::chrono::steady_clock;
  std::vector<double> seconds;
  size_t tokens = 0;
  for (int i = 0; i < iterations; ++i) {
    const auto t0 = Clock::now();
    auto ids = tok.Encode(text, false);
    const auto t1 = Clock::now();
    if (!ids.ok()) {
      std::fprintf(stderr, "error: %s\n", ids.status().message().c_str());
      return 1;
    }
    tokens = ids->size();
    seconds.push_back(std::chrono::duration<double>(t1 - t0).count());
  }
  const double first = seconds.front();
  std::sort(seconds.begin(), seconds.end());
  const double median = seconds[seconds.size() / 2];
  nlohmann::json j = {{"bytes", text.size()},   {"tokens", tokens},
                      {"iterations", iterations}, {"first_s", first},
                      {"median_s", median},       {"mb_per_s", text.size() / median / 1e6}};
  std::printf("%s\n", JsonToString(j).c_str());
  return 0;
}

int RunTokenize(const TokenizeArgs& a) {
  if (!a.text.empty() + !a.file.empty() + !a.chat.empty() != 1) {
    std::fprintf(stderr, "error: give exactly one of --text, --file or --chat\n");
    return 2;
  }
  if (a.add_generation_prompt && a.chat.empty()) {
    std::fprintf(stderr, "error: --add-generation-prompt applies to --chat only\n");
    return 2;
  }
  std::string text = a.text;
  if (!a.file.empty()) {
    auto read = ReadFileBounded(a.file, kMaxRequestFileBytes, "--file");
    if (!read.ok()) {
      std::fprintf(stderr, "error: %s\n", read.status().message().c_str());
      return 2;
    }
    text = std::move(read).value();
  }
  auto tok = tokenizer::Tokenizer::FromModelDir(
      a.model, *tokenizer::ParseTokenizerMode(a.tokenizer_mode));
  if (!tok.ok()) {
    std::fprintf(stderr, "error: %s\n", tok.status().message().c_str());
    return 1;
  }
  if (!a.chat.empty()) {  // rendered prompt, encoded without added special tokens
    auto rendered = RenderChatFile(**tok, a.model, a.chat, a.add_generation_prompt);
    if (!rendered.ok()) {
      std::fprintf(stderr, "error: --chat: %s\n", rendered.status().message().c_str());
      return 2;
    }
    auto ids = (*tok)->Encode(*rendered, /*add_special_tokens=*/false);
    if (!ids.ok()) {
      std::fprintf(stderr, "error: %s\n", ids.status().message().c_str());
      return 2;
    }
    nlohmann::json j;
    j["ids"] = *ids;
    j["prompt"] = *rendered;
    std::printf("%s\n", JsonToString(j).c_str());
    return 0;
  }
  if (a.bench > 0) return RunBench(**tok, text, a.bench);
  auto ids = (*tok)->Encode(text, !a.no_special);
  if (!ids.ok()) {
    std::fprintf(stderr, "error: %s\n", ids.status().message().c_str());
    return 2;
  }
  nlohmann::json j;
  j["ids"] = *ids;
  std::printf("%s\n", JsonToString(j).c_str());
  return 0;
}

struct DetokenizeArgs {
  std::string model;
  std::string tokenizer_mode = "auto";
  std::string ids;
  bool skip_special = false;
};

int RunDetokenize(const DetokenizeArgs& a) {
  std::vector<int32_t> ids;
  std::string error;
  if (!ParseIdList(a.ids, &ids, &error)) {
    std::fprintf(stderr, "error: --ids: %s\n", error.c_str());
    return 2;
  }
  auto tok = tokenizer::Tokenizer::FromModelDir(
      a.model, *tokenizer::ParseTokenizerMode(a.tokenizer_mode));
  if (!tok.ok()) {
    std::fprintf(stderr, "error: %s\n", tok.status().message().c_str());
    return 1;
  }
  for (const int32_t id : ids) {  // as /detokenize: an id past the vocabulary is an error, not ""
    if (id >= (*tok)->id_limit()) {
      std::fprintf(stderr, "error: --ids: token id %d is outside the vocabulary (0 … %d)\n", id,
                   (*tok)->id_limit() - 1);
      return 2;
    }
  }
  const std::string text = (*tok)->Decode(ids, a.skip_special);
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::printf("\n");
  return 0;
}

}  // namespace

RunFn AddTokenizeCommand(CLI::App& cmd) {
  auto a = std::make_shared<TokenizeArgs>();
  cmd.add_option("--model", a->model, "model folder with its tokenizer files")->required();
  cmd.add_option("--tokenizer-mode", a->tokenizer_mode,
                 "how the tokenizer is built: auto (as transformers 5's AutoTokenizer) or "
                 "tokenizers (tokenizer.json exactly as the tokenizers library reads it)")
      ->check(CLI::IsMember({"auto", "tokenizers"}));
  cmd.add_option("--text", a->text, "text to encode");
  cmd.add_option("--file", a->file, "file whose contents to encode");
  cmd.add_option("--chat", a->chat,
                 "file holding a JSON messages list, rendered with the model's chat template");
  cmd.add_flag("--add-generation-prompt", a->add_generation_prompt,
               "end the rendered chat with the assistant turn's opening");
  cmd.add_flag("--no-special-tokens", a->no_special,
               "do not add special tokens (BOS ...); the default adds them like HF encode");
  cmd.add_option("--bench", a->bench,
                 "encode N times (no special tokens) and print timing JSON instead of ids")
      ->check(CLI::Range(1, 1000000));  // each run's time is kept: bounded
  return [a] { return RunTokenize(*a); };
}

RunFn AddDetokenizeCommand(CLI::App& cmd) {
  auto a = std::make_shared<DetokenizeArgs>();
  cmd.add_option("--model", a->model, "model folder with its tokenizer files")->required();
  cmd.add_option("--tokenizer-mode", a->tokenizer_mode,
                 "how the tokenizer is built: auto (as transformers 5's AutoTokenizer) or "
                 "tokenizers (tokenizer.json exactly as the tokenizers library reads it)")
      ->check(CLI::IsMember({"auto", "tokenizers"}));
  cmd.add_option("--ids", a->ids, "token ids: 1,2,3")->required();
  cmd.add_flag("--skip-special-tokens", a->skip_special, "drop special tokens from the text");
  return [a] { return RunDetokenize(*a); };
}

}  // namespace loom::cli
