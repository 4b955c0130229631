// loom command-line entry point: dispatches to the subcommands.
#include <pthread.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <exception>
#include <map>
#include <new>
#include <set>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "base/interrupt.h"
#include "base/json.h"
#include "base/thread_pool.h"
#include "cli/commands.h"
#include "cli/lora_cli.h"
#include "cli/startup_signals.h"
#include "ops/matmul.h"

namespace {

// The first option of `app` or its parsed subcommands given an empty value ("--port ''", an
// unset shell variable), or "". CLI11 reads "" as 0 for a number (--port '' bound a random
// port, --temperature '' sampled greedily), and an empty path or name fell back to its default
// without a word (serve --model '' served the bundled demo). Exempt: an empty --api-key (no
// authentication, as vLLM; serve says so) and chat's --system (no system message).
std::string EmptyValueOption(const CLI::App& app) {
  static const std::set<std::string> kMayBeEmpty = {"--api-key", "--system"};
  for (const CLI::Option* opt : app.get_options()) {
    if (opt->count() == 0 || opt->get_type_size_min() == 0) continue;  // absent, or a flag
    const std::string name = opt->get_name();
    if (kMayBeEmpty.count(name) != 0) continue;
    for (const std::string& v : opt->results()) {
      if (v.empty()) return name;
    }
  }
  for (const CLI::App* sub : app.get_subcommands()) {
    if (std::string name = EmptyValueOption(*sub); !name.empty()) return name;
  }
  return "";
}

// The first integer option of `app` or its parsed subcommands whose value is not plain decimal
// (an optional sign, then 0 or digits without a leading zero), with that value; or "". CLI11 2.1
// reads integers in C's base 0: "--port 010" listened on port 8, "--group-size 040" wrote
// group 32, "--max-tokens 0x10" ran 16.
std::pair<std::string, std::string> NonDecimalIntegerOption(const CLI::App& app) {
  for (const CLI::Option* opt : app.get_options()) {
    // "INT", or "INT:<validator description>" (CLI11 appends its validators').
    const std::string full = opt->get_type_name();
    const std::string type = full.substr(0, full.find(':'));
    if (opt->count() == 0 || (type != "INT" && type != "UINT")) continue;
    for (const std::string& v : opt->results()) {
      const size_t start = !v.empty() && (v[0] == '-' || v[0] == '+') ? 1 : 0;
      const std::string digits = v.substr(start);
      const bool decimal = !digits.empty() &&
                           digits.find_first_not_of("0123456789") == std::string::npos &&
                           (digits.size() == 1 || digits[0] != '0');
      if (!decimal) return {opt->get_name(), v};
    }
  }
  for (const CLI::App* sub : app.get_subcommands()) {
    if (auto found = NonDecimalIntegerOption(*sub); !found.first.empty()) return found;
  }
  return {};
}

// The options of `app` by each of their names ("--api-key", "-m"), and whether each takes a
// value.
void CollectOptions(const CLI::App& app, std::map<std::string, bool>* takes_value) {
  for (const CLI::Option* opt : app.get_options()) {
    const bool value = opt->get_items_expected_min() > 0;  // not a flag (nor a flag's =VALUE)
    for (const std::string& n : opt->get_lnames()) (*takes_value)["--" + n] = value;
    for (const std::string& n : opt->get_snames()) (*takes_value)["-" + n] = value;
  }
}

// An option that takes a value followed by another option's name ("--api-key --allow-runtime-lora"
// with the key's shell variable unset): CLI11 takes the flag as the value, so the key became the
// string "--allow-runtime-lora" and runtime loading stayed off without a word. Returns the pair, or
// {}. A value that really is such a string can be given as --option=VALUE.
std::pair<std::string, std::string> FlagTakenAsValue(const CLI::App& app, int argc, char** argv) {
  // The global options, then those of the command named: one name can be a flag in one command
  // and take a value in another (generate's --merge, serve's --merge NAME).
  std::map<std::string, bool> takes_value;
  CollectOptions(app, &takes_value);
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--") break;
    if (auto it = takes_value.find(arg); it != takes_value.end()) {
      i += it->second ? 1 : 0;  // a global option's value is not the command
      continue;
    }
    const std::vector<const CLI::App*> subs = app.get_subcommands({});
    auto sub = std::find_if(subs.begin(), subs.end(),
                            [&](const CLI::App* s) { return s->get_name() == arg; });
    if (sub != subs.end()) {
      CollectOptions(**sub, &takes_value);
      break;
    }
  }
  for (int i = 1; i + 1 < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--") break;
    auto it = takes_value.find(arg);
    if (it == takes_value.end() || !it->second) continue;
    std::string next = argv[i + 1];
    next = next.substr(0, next.find('='));
    if (takes_value.count(next) != 0) return {arg, argv[i + 1]};
  }
  return {};
}

// A global flag given to a command that never reads it ("loom --kv-cache-dtype bfloat16 merge",
// "loom --quantize int8 tokenize"): it had no effect, without a word. Returns "" or the message.
std::string UnreadGlobalFlag(const CLI::App& app) {
  // merge and quantize refuse the --quantize flags themselves (RejectGlobalQuantizeFlags).
  static const std::vector<std::string> kNoCompute = {"--kv-cache-dtype", "--exact-bf16",
                                                      "--fast-bf16"};
  static const std::vector<std::string> kNoModelLoad = {"--kv-cache-dtype",
                                                        "--exact-bf16",
                                                        "--fast-bf16",
                                                        "--quantize",
                                                        "--quantize-group-size",
                                                        "--quantize-head",
                                                        "--quantize-double-quant"};
  static const std::map<std::string, std::vector<std::string>> kUnread = {
      {"inspect", kNoCompute},    {"merge", kNoCompute},        {"quantize", kNoCompute},
      {"tokenize", kNoModelLoad}, {"detokenize", kNoModelLoad},
  };
  for (const CLI::App* sub : app.get_subcommands()) {
    auto it = kUnread.find(sub->get_name());
    if (it == kUnread.end()) continue;
    for (const std::string& flag : it->second) {
      const CLI::Option* opt = app.get_option_no_throw(flag);
      if (opt != nullptr && opt->count() > 0) {
        return "loom " + sub->get_name() + " does not read " + flag + " (it would have no effect)";
      }
    }
  }
  return "";
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"loom: serve many LoRA adapters on one base model"};
  app.require_subcommand(1);
  app.fallthrough();  // global flags (--threads) may also follow the subcommand
  // A flag CLI11 rejects (a value outside its set, a malformed number) says "error" as the
  // commands' own errors do.
  app.failure_message([](const CLI::App* a, const CLI::Error& e) {
    return "error: " + CLI::FailureMessage::simple(a, e);
  });
  int threads = 0;
  app.add_option("--threads", threads,
                 "compute threads (default: all cores, or LOOM_THREADS; capped to the cores)")
      ->check(CLI::Range(0, INT32_MAX));
  bool exact_bf16 = false;
  app.add_flag("--exact-bf16", exact_bf16,
               "matmuls on bf16 weights keep the activations exact: a hi+lo bf16 pair on AMX "
               "tiles (~2^-17 relative error, ~0.6-0.7x the prefill speed), f32 activations x "
               "widened weights below AMX (as the golden tests check against transformers in "
               "f32) instead of the default single bf16 rounding (~2^-9, what transformers and "
               "vLLM compute in bf16)");
  bool fast_bf16 = false;  // deprecated: single rounding is the default now
  app.add_flag("--fast-bf16", fast_bf16,
               "deprecated, no effect: activations are rounded to bf16 once by default "
               "(see --exact-bf16)");
  loom::cli::AddQuantizeFlags(&app);
  loom::cli::AddKvCacheDtypeFlag(&app);
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
  auto* quantize = app.add_subcommand("quantize", "write a compressed-tensors checkpoint (int8 W8A8 or int4 W4A16) quantized by loom");
  runs[quantize] = loom::cli::AddQuantizeCommand(*quantize);
  auto* perplexity = app.add_subcommand("perplexity", "token-level perplexity of a text file (with --quantize and --lora as at serving)");
  runs[perplexity] = loom::cli::AddPerplexityCommand(*perplexity);
  if (const auto [flag, value] = FlagTakenAsValue(app, argc, argv); !flag.empty()) {
    std::fprintf(stderr,
                 "error: %s is followed by the option %s instead of a value (a missing value, such "
                 "as an unset shell variable?); write %s=VALUE if that is the value meant\n",
                 flag.c_str(), loom::PrintableAscii(value.substr(0, 60)).c_str(), flag.c_str());
    return 2;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help is exit 0; every usage error exit 2, as loom's own checks (CLI11's codes were
    // 104-114, so scripts could not tell a usage error from a failed run).
    return app.exit(e) == 0 ? 0 : 2;
  }
  if (const std::string empty = EmptyValueOption(app); !empty.empty()) {
    std::fprintf(stderr, "error: %s was given an empty value\n", empty.c_str());
    return 2;
  }
  if (const auto [name, value] = NonDecimalIntegerOption(app); !name.empty()) {
    std::fprintf(stderr, "error: %s '%s': integers are written in decimal, without leading zeros\n",
                 name.c_str(), loom::PrintableAscii(value.substr(0, 40)).c_str());
    return 2;
  }
  if (const std::string unread = UnreadGlobalFlag(app); !unread.empty()) {
    std::fprintf(stderr, "error: %s\n", unread.c_str());
    return 2;
  }
  if (serve->parsed()) {
    // serve takes SIGTERM / SIGINT with sigwait (and a start-up watcher): blocked before any
    // thread starts, or `--threads N` started compute threads that a signal could land on and
    // end the process without a word (review).
    const sigset_t signals = loom::cli::ServeSignals();
    pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  }
  if (threads > 0) loom::ThreadPool::SetGlobalThreads(threads);
  if (fast_bf16 && exact_bf16) {
    std::fprintf(stderr, "error: --fast-bf16 (deprecated) contradicts --exact-bf16\n");
    return 2;
  }
  if (fast_bf16) std::fprintf(stderr, "loom: warning: --fast-bf16 is deprecated and the default now\n");
  loom::GlobalMatmulOptions().bf16_split = exact_bf16;
  for (auto& [cmd, run] : runs) {
    if (!cmd->parsed()) continue;
    // Commands report errors as Status; this is the last guard, so that nothing a file or a
    // flag causes ends in std::terminate.
    try {
      return run();
    } catch (const std::bad_alloc&) {
      std::fprintf(stderr, "error: out of memory\n");
    } catch (const std::system_error& e) {  // a thread, a lock: what the system could not give
      std::fprintf(stderr, "error: the system refused a resource (a thread, memory for it): %s\n",
                   e.what());
    } catch (const std::exception& e) {
      std::fprintf(stderr, "error: %s\n", e.what());
    }
    loom::RaiseNotedSignal();  // a Ctrl-C noted before the exception: end as it would have
    return 1;
  }
  return 2;
}
