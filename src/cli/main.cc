// loom command-line entry point: dispatches to the subcommands.
#include <cstdio>
#include <exception>
#include <map>
#include <new>

#include "base/thread_pool.h"
#include "cli/commands.h"
#include "cli/lora_cli.h"
#include "ops/matmul.h"

int main(int argc, char** argv) {
  CLI::App app{"loom: serve many LoRA adapters on one base model"};
  app.require_subcommand(1);
  app.fallthrough();  // global flags (--threads) may also follow the subcommand
  int threads = 0;
  app.add_option("--threads", threads,
                 "compute threads (default: all cores, or LOOM_THREADS; capped to the cores)")
      ->check(CLI::NonNegativeNumber);
  bool fast_bf16 = false;
  app.add_flag("--fast-bf16", fast_bf16,
               "prefill matmuls on bf16 weights round activations to bf16 once (faster on CPUs "
               "without AMX; ~2^-9 relative error, like transformers running in bf16) instead "
               "of the default hi+lo split (~2^-17)");
  loom::cli::AddQuantizeFlags(&app);
  std::map<CLI::App*, loom::cli::RunFn> runs;
  auto* serve = app.add_subcommand("serve", "OpenAI-compatible HTTP server (vLLM's API and flags)");
  runs[serve] = loom::cli::AddServeCommand(*serve);
  auto* chat = app.add_subcommand("chat", "interactive chat in the terminal (the model's chat template, streamed)");
  runs[chat] = loom::cli::AddChatCommand(*chat);
  auto* gen = app.add_subcommand("generate", "generate tokens from a prompt");
  runs[gen] = loom::cli::AddGenerateCommand(*gen);
  auto* bench = app.add_subcommand("bench", "measure prefill and decode tokens/s");
  runs[bench] = loom::cli::AddBenchCommand(*bench);
  auto* tokenize = app.add_subcommand("tokenize", "text → token ids with the model's tokenizer");
  runs[tokenize] = loom::cli::AddTokenizeCommand(*tokenize);
  auto* detokenize = app.add_subcommand("detokenize", "token ids → text");
  runs[detokenize] = loom::cli::AddDetokenizeCommand(*detokenize);
  auto* inspect = app.add_subcommand("inspect", "validate a model / adapter and show what would be applied");
  runs[inspect] = loom::cli::AddInspectCommand(*inspect);
  auto* merge = app.add_subcommand("merge", "write a checkpoint with an adapter merged in");
  runs[merge] = loom::cli::AddMergeCommand(*merge);
  CLI11_PARSE(app, argc, argv);
  if (threads > 0) loom::ThreadPool::SetGlobalThreads(threads);
  if (fast_bf16) loom::GlobalMatmulOptions().bf16_split = false;
  for (auto& [cmd, run] : runs) {
    if (!cmd->parsed()) continue;
    // Commands report errors as Status; this is the last guard, so that nothing a file or a
    // flag causes ends in std::terminate.
    try {
      return run();
    } catch (const std::bad_alloc&) {
      std::fprintf(stderr, "error: out of memory\n");
      return 1;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "error: %s\n", e.what());
      return 1;
    }
  }
  return 2;
}
