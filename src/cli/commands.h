// CLI subcommands: each registers its flags on the app and returns the function that runs it.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <vector>

#include "engine/sampler.h"
#include "cli/request_check.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace loom::cli {

using RunFn = std::function<int()>;

RunFn AddGenerateCommand(CLI::App& app);
RunFn AddBenchCommand(CLI::App& app);
RunFn AddTokenizeCommand(CLI::App& app);
RunFn AddDetokenizeCommand(CLI::App& app);
RunFn AddServeCommand(CLI::App& app);
RunFn AddChatCommand(CLI::App& app);
RunFn AddQuantizeCommand(CLI::App& app);    // quantize_cli.cc
RunFn AddPerplexityCommand(CLI::App& app);  // quantize_cli.cc

// A CLI11 check: decimal digits only, at most `max` (no sign, no wrap, no saturation).
CLI::Validator DecimalInteger(uint64_t max);
// An error when any global quantize flag was given to a command that writes a checkpoint
// (quantize, merge), where it would be ignored silently or produce a dense checkpoint.
Status RejectGlobalQuantizeFlags(const std::string& command);

// Sampling flags shared by commands (--temperature, --top-k, ...).
void AddSamplingFlags(CLI::App* cmd, SamplingParams* params, int64_t* seed);
// A sampling validation message (SamplingParams::Validate, ValidateRequestSize: they name the
// request field, "max_tokens must be …") led by the flag that set it ("--max-tokens: …").
std::string WithSamplingFlag(const std::string& message);

// --no-check-weights: skip the finite check of every weight at load (LoadOptions).
void AddNoCheckWeightsFlag(CLI::App* cmd, bool* no_check_weights);
LoadOptions LoadOptionsFromFlags(bool no_check_weights);
// The global --quantize / --quantize-head flags (main.cc), which LoadOptionsFromFlags applies.
void AddQuantizeFlags(CLI::App* app);
// The global --kv-cache-dtype flag (auto | bfloat16 | float32, vLLM's), and what it means for a
// model: auto is bfloat16 for a checkpoint declared bfloat16 unless --exact-bf16 (whose matmuls
// keep f32 activations), float32 otherwise (this cache has no float16; an odd head_dim, which
// ParseModelConfig already refuses, would get float32 too).
void AddKvCacheDtypeFlag(CLI::App* app);
KvDtype KvCacheDtypeFor(const ModelConfig& config);

// "1,2,3" → ids; error message names the flag.
bool ParseIdList(const std::string& text, std::vector<int32_t>* out, std::string* error);

// Renders a --chat file (a messages list, or {"messages", "tools"}) with the model folder's
// chat template; the result is encoded without adding special tokens, as transformers'
// apply_chat_template does.
StatusOr<std::string> RenderChatFile(const tokenizer::Tokenizer& tok, const std::string& model_dir,
                                     const std::string& chat_path, bool add_generation_prompt);

// The bundled demo model (models/demo): ./models/demo, else next to the binary
// (<exe dir>/../models/demo, <exe dir>/models/demo). Empty when not found.
std::string FindDemoModelDir();
// Its adapters as NAME=DIR specs: every sub-folder of DIR/adapters with an adapter_config.json,
// sorted by name.
std::vector<std::string> DemoAdapterSpecs(const std::string& model_dir);

// Peak resident set size of this process in MiB (from /proc/self/status VmHWM).
double PeakRssMiB();

}  // namespace loom::cli
