// CLI subcommands: each registers its flags on the app and returns the function that runs it.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <vector>

#include "engine/sampler.h"

namespace loom::cli {

using RunFn = std::function<int()>;

RunFn AddGenerateCommand(CLI::App& app);
RunFn AddBenchCommand(CLI::App& app);
RunFn AddTokenizeCommand(CLI::App& app);
RunFn AddDetokenizeCommand(CLI::App& app);

// Sampling flags shared by commands (--temperature, --top-k, ...).
void AddSamplingFlags(CLI::App* cmd, SamplingParams* params, int64_t* seed);

// "1,2,3" → ids; error message names the flag.
bool ParseIdList(const std::string& text, std::vector<int32_t>* out, std::string* error);

// Peak resident set size of this process in MiB (from /proc/self/status VmHWM).
double PeakRssMiB();

}  // namespace loom::cli
