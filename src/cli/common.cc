// Helpers shared by CLI commands.
#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "cli/commands.h"
#include "ops/matmul.h"

namespace loom::cli {

namespace {
struct QuantizeFlags {
  std::string scheme = "none";
  int group = 128;
  bool head = false;
  bool double_quant = false;
};
QuantizeFlags& GlobalQuantizeFlags() {
  static QuantizeFlags flags;
  return flags;
}
std::string& GlobalKvCacheDtype() {
  static std::string dtype = "auto";
  return dtype;
}
}  // namespace

CLI::Validator DecimalInteger(uint64_t max) {
  return CLI::Validator(
      [max](std::string& text) -> std::string {
        // CLI11 2.1 reads "-1" into a uint64_t as 2^64 - 1 and saturates past int64's range.
        errno = 0;
        const unsigned long long v = std::strtoull(text.c_str(), nullptr, 10);
        if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos ||
            errno == ERANGE || v > max) {
          return "'" + text + "' is not an integer in [0, " + std::to_string(max) + "]";
        }
        return "";
      },
      "UINT");
}

Status RejectGlobalQuantizeFlags(const std::string& command) {
  const QuantizeFlags& f = GlobalQuantizeFlags();
  if (f.scheme != "none" || f.group != 128 || f.head || f.double_quant) {
    return InvalidArgument(command + " does not take --quantize, --quantize-group-size, --quantize-head "
                           "or --quantize-double-quant (how serve, generate and bench load a model)" +
                           (command == "loom quantize" ? "; its own flags are --scheme, --group-size and "
                                                         "--quantize-head, after the command"
                                                       : ""));
  }
  return OkStatus();
}

void AddSamplingFlags(CLI::App* cmd, SamplingParams* p, int64_t* seed) {
  cmd->add_option("--max-tokens", p->max_tokens, "tokens to generate")->capture_default_str();
  cmd->add_option("--temperature", p->temperature, "≤ 0 = greedy")->capture_default_str();
  cmd->add_option("--top-k", p->top_k, "keep the k most likely tokens (0 = off)");
  cmd->add_option("--top-p", p->top_p, "nucleus sampling mass (1 = off)");
  cmd->add_option("--min-p", p->min_p, "drop tokens below min_p × the top probability");
  cmd->add_option("--repetition-penalty", p->repetition_penalty, "1 = off");
  cmd->add_option("--presence-penalty", p->presence_penalty, "0 = off");
  cmd->add_option("--frequency-penalty", p->frequency_penalty, "0 = off");
  cmd->add_option("--seed", *seed, "random seed (same seed → same tokens; default: random)")
      ->check(DecimalInteger(INT64_MAX));
  cmd->add_option("--logprobs", p->logprobs, "top-N log-probs per generated token");
  cmd->add_flag("--ignore-eos", p->ignore_eos, "keep generating after end-of-sequence");
}

std::string WithSamplingFlag(const std::string& message) {
  static const std::pair<const char*, const char*> kFlags[] = {
      {"max_tokens", "--max-tokens"},     {"temperature", "--temperature"},
      {"top_k", "--top-k"},               {"top_p", "--top-p"},
      {"min_p", "--min-p"},               {"repetition_penalty", "--repetition-penalty"},
      {"presence_penalty", "--presence-penalty"}, {"frequency_penalty", "--frequency-penalty"},
      {"logprobs", "--logprobs"}};
  for (const auto& [field, flag] : kFlags) {
    if (message.rfind(field, 0) == 0) return std::string(flag) + ": " + message;
  }
  // "prompt (N tokens) + max_tokens (M) exceeds the maximum context length …"
  if (message.find("+ max_tokens") != std::string::npos) return "--max-tokens: " + message;
  return message;
}

void AddNoCheckWeightsFlag(CLI::App* cmd, bool* no_check_weights) {
  cmd->add_flag("--no-check-weights", *no_check_weights,
                "skip the check that every weight is finite (no NaN/Inf) at load");
}

void AddQuantizeFlags(CLI::App* app) {
  app->add_option("--quantize", GlobalQuantizeFlags().scheme,
                   "quantize the weights at load: none (default), int8 (per-row symmetric "
                   "int8 weights: W8A8) or int4 (group-wise symmetric int4 weights with f16 "
                   "scales: W4A8), activations quantized to int8 per row at run time; or nf4 / "
                   "fp4: bitsandbytes' 4-bit quantization (blocks of 64), bit for bit the base a "
                   "QLoRA adapter was trained on, f32 activations")
      ->check(CLI::IsMember({"none", "int8", "int4", "nf4", "fp4"}));
  app->add_option("--quantize-group-size", GlobalQuantizeFlags().group,
                  "with --quantize int4: inputs per scale, 32 or 128 (default 128)")
      ->check(CLI::IsMember({32, 128}));
  app->add_flag("--quantize-double-quant", GlobalQuantizeFlags().double_quant,
                "with --quantize nf4|fp4: bitsandbytes' double quantization of the block scales "
                "(bnb_4bit_use_double_quant, the usual QLoRA setting)");
  app->add_flag("--quantize-head", GlobalQuantizeFlags().head,
                "with --quantize, quantize the output head (lm_head) too");
}

void AddKvCacheDtypeFlag(CLI::App* app) {
  app->add_option("--kv-cache-dtype", GlobalKvCacheDtype(),
                  "element type of the KV cache: auto (default: bfloat16 for a bfloat16 "
                  "checkpoint, as vLLM, unless --exact-bf16; else float32), bfloat16 (half the "
                  "memory and the bytes attention reads; K and V rounded to nearest even) or "
                  "float32")
      ->check(CLI::IsMember({"auto", "bfloat16", "float32"}))
      ->capture_default_str();
}

KvDtype KvCacheDtypeFor(const ModelConfig& config) {
  const std::string& flag = GlobalKvCacheDtype();
  if (flag == "bfloat16") return KvDtype::kBf16;
  if (flag == "float32") return KvDtype::kF32;
  return config.dtype == DType::kBF16 && !GlobalMatmulOptions().bf16_split &&
                 config.head_dim % 2 == 0  // the bf16 cache pairs K's dimensions
             ? KvDtype::kBf16
             : KvDtype::kF32;
}

LoadOptions LoadOptionsFromFlags(bool no_check_weights) {
  LoadOptions options;
  options.check_weights = !no_check_weights;
  if (GlobalQuantizeFlags().scheme == "int8") options.quantize = LoadOptions::Quantization::kInt8;
  if (GlobalQuantizeFlags().scheme == "int4") options.quantize = LoadOptions::Quantization::kInt4;
  if (GlobalQuantizeFlags().scheme == "nf4") options.quantize = LoadOptions::Quantization::kNf4;
  if (GlobalQuantizeFlags().scheme == "fp4") options.quantize = LoadOptions::Quantization::kFp4;
  options.quantize_group = GlobalQuantizeFlags().group;
  options.quantize_head = GlobalQuantizeFlags().head;
  options.quantize_double_quant = GlobalQuantizeFlags().double_quant;
  return options;
}

bool ParseIdList(const std::string& text, std::vector<int32_t>* out, std::string* error) {
  out->clear();
  std::stringstream ss(text);
  std::string item;
  if (!text.empty() && text.back() == ',') {  // getline drops a trailing empty item
    *error = "'' is not a token id";
    return false;
  }
  while (std::getline(ss, item, ',')) {
    // strtoll, not stol: no exceptions, and "4294967297" must not wrap to 1.
    errno = 0;
    char* end = nullptr;
    const long long v = std::strtoll(item.c_str(), &end, 10);
    if (item.empty() || end != item.c_str() + item.size() || errno == ERANGE || v < 0 ||
        v > INT32_MAX) {
      *error = "'" + item + "' is not a token id";
      return false;
    }
    out->push_back(static_cast<int32_t>(v));
  }
  if (out->empty()) {
    *error = "no token ids given";
    return false;
  }
  return true;
}

std::string FindDemoModelDir() {
  namespace fs = std::filesystem;
  std::error_code ec;
  std::vector<fs::path> candidates = {fs::path("models") / "demo"};
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    candidates.push_back(exe.parent_path().parent_path() / "models" / "demo");
    candidates.push_back(exe.parent_path() / "models" / "demo");
  }
  for (const fs::path& dir : candidates) {
    if (fs::is_regular_file(dir / "config.json", ec)) return dir.lexically_normal().string();
  }
  return "";
}

std::vector<std::string> DemoAdapterSpecs(const std::string& model_dir) {
  namespace fs = std::filesystem;
  std::vector<std::string> specs;
  std::error_code ec;
  const fs::path root = fs::path(model_dir) / "adapters";
  if (!fs::is_directory(root, ec)) return specs;
  for (fs::directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code ec2;
    if (it->is_directory(ec2) && fs::is_regular_file(it->path() / "adapter_config.json", ec2)) {
      specs.push_back(it->path().filename().string() + "=" + it->path().string());
    }
  }
  std::sort(specs.begin(), specs.end());
  return specs;
}

double PeakRssMiB() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::strtod(line.c_str() + 6, nullptr) / 1024.0;
  }
  return 0;
}

}  // namespace loom::cli
