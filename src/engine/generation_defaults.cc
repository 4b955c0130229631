// LoadGenerationDefaults: generation_config.json's recommended sampling, as vLLM reads it.
#include "engine/generation_defaults.h"

#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "base/file.h"
#include "base/json.h"
#include "engine/request_fields.h"

namespace loom {
namespace {

using json = nlohmann::ordered_json;

// transformers 4.x GenerationConfig() values of the fields vLLM reads (min_p and max_new_tokens
// default to None: any value differs).
bool IsHfDefault(const std::string& key, const json& v) {
  if (!v.is_number()) return false;
  const double x = v.get<double>();
  if (key == "temperature" || key == "top_p" || key == "repetition_penalty") return x == 1.0;
  if (key == "top_k") return x == 50.0;
  return false;
}

constexpr const char* kFields[] = {"temperature",        "top_p",         "top_k", "min_p",
                                   "repetition_penalty", "max_new_tokens"};

// The float fields, each a default of ours and the SamplingParams member it fills.
struct FloatField {
  const char* name;
  std::optional<float> GenerationDefaults::*mine;
  float SamplingParams::*theirs;
};
constexpr FloatField kFloatFields[] = {
    {"temperature", &GenerationDefaults::temperature, &SamplingParams::temperature},
    {"top_p", &GenerationDefaults::top_p, &SamplingParams::top_p},
    {"min_p", &GenerationDefaults::min_p, &SamplingParams::min_p},
    {"repetition_penalty", &GenerationDefaults::repetition_penalty,
     &SamplingParams::repetition_penalty},
};

// Reads the fields of `obj` into *d (skipping HF defaults when `diff_only`); `where` names the
// source in errors. *max_new_tokens gets that field when present. A null removes the field's
// value (vLLM updates its dict with the override, then drops the None values).
Status ReadFields(const json& obj, bool diff_only, const std::string& where, GenerationDefaults* d,
                  std::optional<int>* max_new_tokens) {
  for (const char* key : kFields) {
    auto it = obj.find(key);
    if (it == obj.end()) continue;
    const std::string k = key;
    if (it->is_null()) {
      for (const FloatField& f : kFloatFields) {
        if (k == f.name) (d->*f.mine).reset();
      }
      if (k == "top_k") d->top_k.reset();
      if (k == "max_new_tokens") {
        d->max_tokens.reset();
        d->max_tokens_cap.reset();
      }
      continue;
    }
    if (diff_only && IsHfDefault(key, *it)) continue;
    auto fail = [&](const Status& st) { return InvalidArgument(where + ": " + st.message()); };
    if (k == "max_new_tokens") {
      int n = 0;
      if (Status st = JsonInt32(k, *it, 1, kMaxTokensLimit, &n); !st.ok()) return fail(st);
      *max_new_tokens = n;
      continue;
    }
    SamplingParams p;  // the request parser's ranges and messages
    Status st;
    ParseSamplingField(k, *it, &p, &st);
    if (!st.ok()) return fail(st);
    for (const FloatField& f : kFloatFields) {
      if (k == f.name) d->*f.mine = p.*f.theirs;
    }
    if (k == "top_k") d->top_k = p.top_k;
  }
  return OkStatus();
}

}  // namespace

void GenerationDefaults::Apply(const std::function<bool(const char* field)>& given,
                               SamplingParams* params) const {
  for (const FloatField& f : kFloatFields) {
    if ((this->*f.mine) && !given(f.name)) params->*f.theirs = *(this->*f.mine);
  }
  if (top_k && !given("top_k")) params->top_k = *top_k;
}

std::string GenerationDefaults::Describe() const {
  std::string out;
  auto add = [&](const char* name, const std::string& v) {
    out += (out.empty() ? "" : ", ") + std::string(name) + "=" + v;
  };
  auto num = [](double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", v);
    return std::string(buf);
  };
  for (const FloatField& f : kFloatFields) {
    if (this->*f.mine) add(f.name, num(*(this->*f.mine)));
  }
  if (top_k) add("top_k", std::to_string(*top_k));
  if (max_tokens) add("max_tokens", std::to_string(*max_tokens));
  if (max_tokens_cap) add("max_tokens cap", std::to_string(*max_tokens_cap));
  return out;
}

StatusOr<GenerationDefaults> LoadGenerationDefaults(const std::string& mode,
                                                    const std::string& model_dir,
                                                    const std::string& override_json) {
  GenerationDefaults d;
  if (mode.empty()) return InvalidArgument("--generation-config must be auto, vllm or a folder");
  if (mode != "vllm") {
    const bool folder = mode != "auto";
    if (folder) {  // vLLM's --generation-config names a folder; a file path read as one failed obscurely
      std::error_code ec;
      if (!std::filesystem::is_directory(mode, ec)) {
        return InvalidArgument("--generation-config " + mode + ": not a folder (give auto, vllm, or the folder "
                               "holding generation_config.json)");
      }
    }
    const std::string path = (folder ? mode : model_dir) + "/generation_config.json";
    ASSIGN_OR_RETURN(const bool exists, RegularFileExists(path));
    if (folder && !exists) {
      return InvalidArgument("--generation-config " + mode + ": no generation_config.json there");
    }
    if (exists) {
      ASSIGN_OR_RETURN(std::string text, ReadFileBounded(path, kMaxConfigFileBytes));
      ASSIGN_OR_RETURN(json g, ParseOrderedJson(text, path));
      if (!g.is_object()) return InvalidArgument(path + ": not a JSON object");
      std::optional<int> max_new;
      RETURN_IF_ERROR(ReadFields(g, /*diff_only=*/true, path, &d, &max_new));
      d.max_tokens = max_new;
      if (folder) d.max_tokens_cap = max_new;
    }
  }
  if (!override_json.empty()) {
    const std::string where = "--override-generation-config";
    ASSIGN_OR_RETURN(json o, ParseOrderedJson(override_json, where));
    if (!o.is_object()) return InvalidArgument(where + ": must be a JSON object");
    for (auto it = o.begin(); it != o.end(); ++it) {
      bool known = false;
      for (const char* k : kFields) known = known || it.key() == k;
      if (!known) {
        return InvalidArgument(where + ": unknown field '" +
                               KeyForMessage(it.key()) +
                               "' (known: temperature, top_p, top_k, min_p, repetition_penalty, "
                               "max_new_tokens)");
      }
    }
    std::optional<int> max_new;
    RETURN_IF_ERROR(ReadFields(o, /*diff_only=*/false, where, &d, &max_new));
    if (max_new) {  // the chat default and every request's cap (vLLM's override_max_tokens)
      d.max_tokens = max_new;
      d.max_tokens_cap = max_new;
    }
  }
  return d;
}

}  // namespace loom
