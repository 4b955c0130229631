// adapter_config.json parsing: accepted fields, rejected features (each named), PEFT matching.
#include "lora/lora_config.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <type_traits>

#include "base/json.h"

namespace loom {

using json = nlohmann::ordered_json;  // file order: PEFT takes the first matching pattern key

namespace {

constexpr int64_t kMaxRank = 4096;  // sanity bound on r and rank_pattern values
constexpr int kMaxJsonDepth = 32;
// layers_to_transform entries (a model has at most a few hundred layers); and any list in the
// file, bounded before the DOM is built (16 MB of "0," made a 5.4M-element list and 318 MB).
constexpr int64_t kMaxLayersToTransform = 65536;
// layers_pattern names the layer list's attribute ("layers", "h", "blocks"): real configs have
// one or two; each entry is a compiled regex matched against every module path.
constexpr size_t kMaxLayersPatterns = 64;
constexpr int64_t kMaxJsonArrayElements = int64_t{1} << 20;

std::string Lower(std::string s) {
  for (char& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return s;
}

// Keys loom reads or knowingly accepts; anything else is an ignored (logged) key.
const std::set<std::string>& KnownKeys() {
  static const std::set<std::string> keys = {
      "peft_type", "r", "lora_alpha", "use_rslora", "use_dora", "lora_bias", "target_modules",
      "exclude_modules", "layers_to_transform", "layers_pattern", "rank_pattern", "alpha_pattern",
      "base_model_name_or_path", "init_lora_weights", "modules_to_save", "bias",
      "layer_replication", "target_parameters", "use_qalora", "alora_invocation_tokens",
      "trainable_token_indices", "fan_in_fan_out", "lora_dropout", "task_type", "inference_mode",
      "revision", "auto_mapping", "megatron_config", "megatron_core", "loftq_config", "eva_config",
      "corda_config", "qalora_group_size", "lora_ga_config", "use_bdlora", "bdlora_config",
      "variant", "velora_config", "monteclora_config", "arrow_config", "kasa_config",
      // Informational.
      "peft_version", "ensure_weight_tying"};
  return keys;
}

bool IsNullOrEmpty(const json& v) {
  return v.is_null() || (v.is_array() && v.empty()) || (v.is_object() && v.empty()) ||
         (v.is_string() && v.get<std::string>().empty()) || (v.is_boolean() && !v.get<bool>());
}

Status ReadStringOrList(const json& v, const std::string& where, const char* key,
                        std::vector<std::string>* list, std::optional<Regex>* regex) {
  if (v.is_string()) {
    ASSIGN_OR_RETURN(Regex re, Regex::Compile(v.get<std::string>(), where + " " + key));
    *regex = std::move(re);
    return OkStatus();
  }
  if (!v.is_array()) return InvalidArgument(where + ": " + key + " must be a list or a string");
  for (const auto& e : v) {
    if (!e.is_string()) return InvalidArgument(where + ": " + key + " entries must be strings");
    list->push_back(e.get<std::string>());
  }
  return OkStatus();
}

// The scale (alpha / r, or alpha / sqrt(r)) multiplies f32 deltas: an alpha past f32's range
// (1e300 is a finite JSON number) would make every delta infinite, and a merge write Inf weights.
Status CheckAlphaFitsFloat(double alpha, const std::string& field, const std::string& where) {
  if (std::fabs(alpha) <= std::numeric_limits<float>::max()) return OkStatus();
  char text[32];
  std::snprintf(text, sizeof(text), "%g", alpha);
  return InvalidArgument(where + ": " + field + " " + text +
                         " is beyond float range (3.4e38): the adapter's scale would be infinite");
}

// `v` must stay an ordered_json: converting it to nlohmann::json (a std::map) would sort the
// keys, and PEFT takes the first matching key in file order.
template <typename T>
Status ReadPattern(const json& v, const std::string& where, const char* key,
                   std::vector<std::pair<Regex, T>>* out) {
  if (v.is_null()) return OkStatus();
  if (!v.is_object()) return InvalidArgument(where + ": " + key + " must be an object");
  for (auto it = v.begin(); it != v.end(); ++it) {  // the file's order
    if (!it.value().is_number()) {
      return InvalidArgument(where + ": " + key + " value for '" + KeyForMessage(it.key()) +
                             "' must be a number");
    }
    if constexpr (std::is_integral_v<T>) {  // a rank: an integer in r's range
      if (!it.value().is_number_integer() || it.value().template get<int64_t>() <= 0 ||
          it.value().template get<int64_t>() > kMaxRank) {
        return InvalidArgument(where + ": " + key + " value for '" + KeyForMessage(it.key()) +
                               "' must be a positive integer (at most " + std::to_string(kMaxRank) +
                               "), got " + JsonToString(it.value(), -1, 80));
      }
    }
    if constexpr (std::is_floating_point_v<T>) {
      double alpha = 0;
      const std::string field = std::string(key) + " value for '" + KeyForMessage(it.key()) + "'";
      RETURN_IF_ERROR(JsonValueToFloat(it.value(), field, where, &alpha));
      RETURN_IF_ERROR(CheckAlphaFitsFloat(alpha, field, where));
    }
    // Same as PEFT get_pattern_key: re.match(rf"(.*\.)?({key})$", module_path).
    ASSIGN_OR_RETURN(Regex re, Regex::Compile("(.*\\.)?(" + it.key() + ")$", where + " " + key));
    out->emplace_back(std::move(re), it.value().get<T>());
  }
  return OkStatus();
}

}  // namespace

StatusOr<LoraConfig> ParseLoraConfig(const std::string& json_text, const std::string& where) {
  // Values are copied and printed recursively below: the depth is bounded before parsing
  // (real configs nest 3 levels).
  JsonLimits limits;
  limits.max_depth = kMaxJsonDepth;
  limits.max_bytes = size_t{16} << 20;
  limits.max_array_elements = kMaxJsonArrayElements;
  ASSIGN_OR_RETURN(json j, ParseOrderedJson(json_text, where, limits));
  if (!j.is_object()) return InvalidArgument(where + ": not a valid JSON object");
  static const json kAbsent;                        // null
  auto get = [&](const char* key) -> const json& {  // by reference: a value may be megabytes
    auto it = j.find(key);
    return it == j.end() ? kAbsent : *it;
  };
  const json& peft_type = get("peft_type");
  if (!peft_type.is_string()) {
    return InvalidArgument(where + ": no peft_type; not a PEFT adapter config (loom serves PEFT "
                                   "LoRA adapters)");
  }
  if (peft_type != "LORA") {
    return InvalidArgument(where + ": peft_type " + TextForMessage(peft_type.get<std::string>()) +
                           " is not supported: loom serves LoRA adapters (peft_type LORA) only");
  }
  LoraConfig c;
  const json& r = get("r");
  if (!r.is_null() || j.contains("r")) {  // absent: PEFT's default r = 8
    if (!r.is_number_integer() || r.get<int64_t>() <= 0 || r.get<int64_t>() > kMaxRank) {
      return InvalidArgument(where + ": r must be a positive integer (at most " +
                             std::to_string(kMaxRank) + "), got " + JsonToString(r, -1, 80));
    }
    c.r = r.get<int>();
  }
  c.lora_alpha = 8.0;  // PEFT default when absent; a string or a non-finite value is an error
  if (j.contains("lora_alpha") && get("lora_alpha").is_null()) {
    // PEFT passes None through and fails dividing it by r; it is not the default.
    return InvalidArgument(where + ": lora_alpha is null; it must be a number");
  }
  RETURN_IF_ERROR(GetOptionalFloat(j, "lora_alpha", where, &c.lora_alpha));
  RETURN_IF_ERROR(CheckAlphaFitsFloat(c.lora_alpha, "lora_alpha", where));
  for (const char* key : {"use_rslora", "use_dora", "lora_bias", "ensure_weight_tying"}) {
    const json& v = get(key);
    if (!v.is_null() && !v.is_boolean()) return InvalidArgument(where + ": " + key + " must be true or false");
  }
  c.use_rslora = get("use_rslora").is_boolean() && get("use_rslora").get<bool>();
  c.use_dora = get("use_dora").is_boolean() && get("use_dora").get<bool>();
  c.lora_bias = get("lora_bias").is_boolean() && get("lora_bias").get<bool>();
  c.ensure_weight_tying =
      get("ensure_weight_tying").is_boolean() && get("ensure_weight_tying").get<bool>();

  // Features that change the base weights or add per-adapter modules: rejected by name.
  // init_lora_weights only matters when it leaves a mark on the trained adapter. true / false /
  // gaussian / eva / orthogonal set the starting A and B only: a trained adapter is a plain LoRA
  // and PEFT loads it as one. pissa / olora / corda / loftq / lora_ga subtract the initial B·A
  // from the base weights; mica is a LoRA variant.
  const json& init = get("init_lora_weights");
  // PEFT (LoraLayer.update_layer) takes true, false or a string; any other value that is true
  // in Python (5, 1.5, [1]) reaches init_lora_weights.lower() and fails, a false one (0, null,
  // []) skips the initialisation and loads.
  const bool init_zero = init.is_number() && init.get<double>() == 0;
  if (!init.is_boolean() && !init.is_string() && !IsNullOrEmpty(init) && !init_zero) {
    return InvalidArgument(where + ": init_lora_weights must be true, false or a string, got " +
                           JsonToString(init, -1, 80) + " (PEFT fails initialising the layers)");
  }
  // PEFT's LoraConfig: lora_bias only with init_lora_weights in (True, False), which 0 equals.
  if (c.lora_bias && j.contains("init_lora_weights") && !init.is_boolean() && !init_zero) {
    return InvalidArgument(where + ": lora_bias is only supported with init_lora_weights true or " +
                           "false, got " + JsonToString(init, -1, 80) +
                           "; PEFT refuses this config");
  }
  if (init.is_string()) {
    const std::string v = init.get<std::string>();
    // As PEFT compares them: "gaussian" and "olora" in any case, the others exactly; "" is
    // false in Python (no initialisation).
    const std::string lower = Lower(v);
    const bool plain = v.empty() || lower == "gaussian" || v == "eva" || v == "orthogonal";
    const bool changes_base = v.rfind("pissa", 0) == 0 || v.rfind("corda", 0) == 0 ||
                              lower == "olora" || v == "loftq" || v == "lora_ga";
    if (changes_base) {
      return InvalidArgument(
          where + ": init_lora_weights '" + TextForMessage(v) +
          "' is not supported: this initialisation changes the base weights, so "
          "the adapter is only valid against a modified base model (convert it to "
          "a plain LoRA first)");
    }
    if (!plain) {
      return InvalidArgument(
          where + ": init_lora_weights '" + TextForMessage(v) +
          "' is not supported yet (a LoRA variant or an unknown initialisation)");
    }
  }
  struct Unsupported {
    const char* key;
    const char* why;
  };
  static const Unsupported kNotYet[] = {
      {"layer_replication", "layer_replication is not supported yet"},
      {"use_qalora", "use_qalora is not supported yet"},
      {"alora_invocation_tokens", "alora_invocation_tokens (activated LoRA) is not supported yet"},
      {"use_bdlora", "use_bdlora is not supported yet"},
      {"variant", "LoRA variants are not supported yet"},
      {"velora_config", "the VeLoRA variant is not supported yet"},
      {"monteclora_config", "the MonteCLoRA variant is not supported yet"},
      {"arrow_config", "the Arrow variant is not supported yet"},
      {"kasa_config", "the KaSA variant is not supported yet"},
      {"modules_to_save", "modules_to_save is not supported yet: it replaces whole base modules per adapter"},
      {"trainable_token_indices", "trainable_token_indices is not supported yet: it replaces embedding rows per adapter"},
  };
  for (const auto& u : kNotYet) {
    const json& v = get(u.key);
    if (!IsNullOrEmpty(v)) return InvalidArgument(where + ": " + u.why + " (" + u.key + " = " + JsonToString(v, -1, 80) + ")");
  }
  const json& bias = get("bias");
  if (!bias.is_null() && !bias.is_string()) {
    return InvalidArgument(where + ": bias must be \"none\", \"all\" or \"lora_only\", got " +
                           JsonToString(bias, -1, 80));
  }
  if (bias.is_string() && bias != "none") {
    return InvalidArgument(where + ": bias '" + TextForMessage(bias.get<std::string>()) +
                           "' is not supported yet: it trains base-model biases per adapter "
                           "(only bias = \"none\")");
  }

  const json& targets = get("target_modules");
  if (targets.is_string() && Lower(targets.get<std::string>()) == "all-linear") {  // as PEFT
    c.all_linear = true;
  } else if (targets.is_null()) {
    return InvalidArgument(where + ": target_modules is not set; PEFT fills it from the model type "
                                   "at training time and saves the list, loom needs that list");
  } else if (targets.is_array() && targets.empty()) {
    // Checked below with target_parameters: PEFT's LoRA on parameters saves target_modules [].
  } else {
    RETURN_IF_ERROR(ReadStringOrList(targets, where, "target_modules", &c.target_list, &c.target_regex));
  }
  // PEFT's LoRA on parameters (transformers 5's fused MoE experts): a list of parameter paths.
  const json& params = get("target_parameters");
  if (!IsNullOrEmpty(params)) {
    if (!params.is_array()) return InvalidArgument(where + ": target_parameters must be a list");
    for (const json& v : params) {
      if (!v.is_string()) return InvalidArgument(where + ": target_parameters entries must be strings");
      c.target_parameters.push_back(v.get<std::string>());
    }
  }
  if (targets.is_array() && targets.empty() && c.target_parameters.empty()) {
    return InvalidArgument(where + ": target_modules is empty; the adapter would change nothing");
  }
  const json& exclude = get("exclude_modules");
  if (!exclude.is_null()) {
    RETURN_IF_ERROR(ReadStringOrList(exclude, where, "exclude_modules", &c.exclude_list, &c.exclude_regex));
  }
  const json& layers = get("layers_to_transform");
  if (layers.is_number()) {
    int64_t layer = 0;
    RETURN_IF_ERROR(JsonValueToInt(layers, "layers_to_transform", where, &layer, 0, INT32_MAX));
    c.layers_to_transform.push_back(static_cast<int>(layer));
  } else if (layers.is_array()) {
    if (static_cast<int64_t>(layers.size()) > kMaxLayersToTransform) {
      return InvalidArgument(where + ": layers_to_transform has " + std::to_string(layers.size()) +
                             " entries, more than " + std::to_string(kMaxLayersToTransform) +
                             " (layer indices of one model)");
    }
    for (const auto& l : layers) {
      if (!l.is_number_integer()) return InvalidArgument(where + ": layers_to_transform entries must be integers");
      int64_t layer = 0;
      RETURN_IF_ERROR(JsonValueToInt(l, "layers_to_transform entry", where, &layer, 0, INT32_MAX));
      c.layers_to_transform.push_back(static_cast<int>(layer));
    }
  } else if (!layers.is_null()) {
    return InvalidArgument(where + ": layers_to_transform must be an integer or a list");
  }
  const json& lp = get("layers_pattern");
  if (lp.is_string() && !lp.get<std::string>().empty()) c.layers_pattern.push_back(lp.get<std::string>());
  if (lp.is_array()) {
    if (lp.size() > kMaxLayersPatterns) {
      return InvalidArgument(where + ": layers_pattern has " + std::to_string(lp.size()) +
                             " entries, more than " + std::to_string(kMaxLayersPatterns) +
                             " (names of a model's layer list)");
    }
    for (const auto& p : lp) {
      // Review finding: entries other than strings were dropped, and [5] became no filter.
      if (!p.is_string()) {
        return InvalidArgument(where + ": layers_pattern entries must be strings, got " +
                               JsonToString(p, -1, 80));
      }
      c.layers_pattern.push_back(p.get<std::string>());
    }
  } else if (!lp.is_null() && !lp.is_string()) {
    return InvalidArgument(where + ": layers_pattern must be a string or a list of strings, got " +
                           JsonToString(lp, -1, 80));
  }
  // PEFT's LoraConfig refuses these with a string target_modules (a regex, or "all-linear"):
  // they would be ignored.
  for (const char* key : {"layers_to_transform", "layers_pattern"}) {
    if (targets.is_string() && !get(key).is_null()) {
      return InvalidArgument(where + ": " + key +
                             " cannot be used when target_modules is a string (a regex or "
                             "\"all-linear\"); PEFT refuses this config");
    }
  }
  // PEFT 0.21's LoraConfig refuses a layers_pattern (a Python truth value: "" and [] are unset)
  // without layers_to_transform (`is None`: 0 is layer 0, and [] restricts nothing).
  const bool pattern_set = (lp.is_string() && !lp.get_ref<const std::string&>().empty()) ||
                           (lp.is_array() && !lp.empty());
  if (pattern_set && layers.is_null()) {
    return InvalidArgument(where + ": layers_pattern is set but layers_to_transform is not (" +
                           JsonToString(layers, -1, 80) +
                           "): it would be ignored; PEFT refuses this config");
  }
  for (const std::string& pattern : c.layers_pattern) {
    // Same as PEFT (check_target_module_exists): re.match(rf".*\.{pattern}\.(\d+)\.", path), the
    // layer being int(match.group(1)); the pattern is pasted in as it is, not bracketed.
    const std::string what = where + " layers_pattern";
    // PEFT 0.21: re.match(rf"(?:^|.*?\.){pattern}\.(?P<idx>\d+)\.", path), lazily: the first
    // place the pattern and a number follow (at the start of the path too).
    ASSIGN_OR_RETURN(Regex re, Regex::Compile("(?:^|.*?\\.)" + pattern + "\\.(\\d+)\\.", what,
                                              /*capture_group1=*/true));
    if (re.python_groups() != 1) {
      return InvalidArgument(what + " '" + TextForMessage(pattern) +
                             "' has a capturing group: loom reads the layer index from group 1 "
                             "(PEFT from a named group); use (?:...)");
    }
    if (re.top_level_alternation()) {
      return InvalidArgument(what + " '" + TextForMessage(pattern) +
                             "' has a | outside any group: PEFT pastes it into "
                             "(?:^|.*?\\.){pattern}\\.(\\d+)\\. as it is, so one side has no layer "
                             "index (PEFT then targets nothing there); use (?:a|b)");
    }
    c.layers_regex.push_back(std::move(re));
  }
  RETURN_IF_ERROR(ReadPattern(get("rank_pattern"), where, "rank_pattern", &c.rank_pattern));
  RETURN_IF_ERROR(ReadPattern(get("alpha_pattern"), where, "alpha_pattern", &c.alpha_pattern));
  if (get("base_model_name_or_path").is_string()) {
    c.base_model_name_or_path = get("base_model_name_or_path").get<std::string>();
  }
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (!KnownKeys().count(it.key())) c.ignored_keys.push_back(it.key());
  }
  return c;
}

namespace {
bool EndsWithDotted(const std::string& path, const std::string& name) {
  return path.size() > name.size() && path.compare(path.size() - name.size(), name.size(), name) == 0 &&
         path[path.size() - name.size() - 1] == '.';
}

bool InList(const std::string& path, const std::vector<std::string>& list) {
  for (const auto& e : list) {
    if (path == e || EndsWithDotted(path, e)) return true;
  }
  return false;
}

// PEFT 0.21's layer index (check_target_module_exists): with no layers_pattern, re.match
// `.*?\.[^.]*\.(\d+)\.` — the FIRST all-digit segment that has two segments before it and one
// after (lazy `.*?`: on model.layers.3.mlp.experts.5.w1 it is 3, the layer, not the expert;
// PEFT before 0.18 took the last); with patterns, the number of the first `patterns` regex
// ((?:^|.*?\.){pattern}\.(\d+)\.) that matches: "language_model.layers" finds 3 in
// model.language_model.layers.3.…, "model.layers" also a path that starts with it, "lay.rs" the
// layers. -1 when none.
int LayerIndex(const std::string& path, const std::vector<Regex>& patterns) {
  auto number = [](const std::string& p) {
    if (p.empty() || p.find_first_not_of("0123456789") != std::string::npos) return -2;
    // More digits than any layer count: no layer of this model (never an int overflow).
    return p.size() > 9 ? -1 : std::stoi(p);
  };
  for (const Regex& re : patterns) {
    std::optional<std::string> digits;
    if (!re.PrefixMatch(path, &digits)) continue;
    // (\d+) takes any Unicode digit in Python; a module path has ASCII ones.
    return digits ? std::max(number(*digits), -1) : -1;
  }
  if (!patterns.empty()) return -1;
  std::vector<std::string> parts;
  size_t start = 0;
  for (size_t i = 0; i <= path.size(); ++i) {
    if (i == path.size() || path[i] == '.') {
      parts.push_back(path.substr(start, i - start));
      start = i + 1;
    }
  }
  for (size_t i = 2; i + 1 < parts.size(); ++i) {
    const int index = number(parts[i]);
    if (index != -2) return index;
  }
  return -1;
}
}  // namespace

bool LoraConfig::Targets(const std::string& path, const std::vector<std::string>& linear_names) const {
  if (exclude_regex ? exclude_regex->FullMatch(path) : InList(path, exclude_list)) return false;
  if (target_regex) return target_regex->FullMatch(path);
  if (!all_linear && std::find(target_list.begin(), target_list.end(), path) != target_list.end()) {
    return true;
  }
  const bool found = InList(path, all_linear ? linear_names : target_list);
  if (!found || layers_to_transform.empty()) return found;
  const int layer = LayerIndex(path, layers_regex);
  return layer >= 0 && std::find(layers_to_transform.begin(), layers_to_transform.end(), layer) !=
                           layers_to_transform.end();
}

int LoraConfig::RankFor(const std::string& path) const {
  for (const auto& [re, rank] : rank_pattern) {
    if (re.PrefixMatch(path)) return rank;
  }
  return r;
}

double LoraConfig::AlphaFor(const std::string& path) const {
  for (const auto& [re, alpha] : alpha_pattern) {
    if (re.PrefixMatch(path)) return alpha;
  }
  return lora_alpha;
}

double LoraConfig::ScaleFor(const std::string& path) const {
  const double rank = RankFor(path);
  const double alpha = AlphaFor(path);
  return use_rslora ? alpha / std::sqrt(rank) : alpha / rank;
}

bool LoraConfig::TargetsParameter(const std::string& param_path) const {
  for (const std::string& t : target_parameters) {
    if (param_path == t || (param_path.size() > t.size() && param_path.ends_with(t) &&
                            param_path[param_path.size() - t.size() - 1] == '.')) {
      return true;
    }
  }
  return false;
}

}  // namespace loom
