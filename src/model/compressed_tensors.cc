// compressed-tensors quantization_config: parse, validate (every field handled or rejected by name), and match projections to schemes as compressed-tensors does.
#include "model/compressed_tensors.h"

#include <algorithm>
#include <unordered_set>
#include <nlohmann/json.hpp>

#include "base/file.h"
#include "base/json.h"

namespace loom {

namespace {

// Caps on config lists that are matched against every projection name at load (a real
// checkpoint lists a few targets and at most hundreds of ignored modules).
constexpr size_t kMaxCtTargets = 4096;
constexpr size_t kMaxCtIgnore = 65536;

using nlohmann::json;

std::string Show(const json& v) { return JsonToString(v, -1, 80); }

// Rejects keys of `obj` outside `known`, naming the first.
Status CheckKeys(const json& obj, std::initializer_list<const char*> known, const std::string& what) {
  for (auto it = obj.begin(); it != obj.end(); ++it) {
    if (std::none_of(known.begin(), known.end(), [&](const char* k) { return it.key() == k; })) {
      return InvalidArgument(what + ": field '" + KeyForMessage(it.key()) + "' (" + Show(it.value()) +
                             ") is not one loom knows how to serve; a compressed-tensors checkpoint "
                             "that needs it is not supported");
    }
  }
  return OkStatus();
}

bool IsNullOrEmpty(const json& obj, const char* key) {
  if (!obj.contains(key)) return true;
  const json& v = obj[key];
  return v.is_null() || (v.is_object() && v.empty()) || (v.is_boolean() && !v.get<bool>());
}

// A field of quantization args: `want` must hold (else the error names field and value).
Status Expect(const json& args, const char* field, const json& want, const std::string& what,
              const std::string& supported) {
  const json v = args.contains(field) ? args[field] : json();
  if (v != want) {
    return InvalidArgument(what + ": " + field + " is " + Show(v) + "; loom supports " + supported);
  }
  return OkStatus();
}

// Weight args of one group for its format.
Status ParseWeights(const json& w, const std::string& format, const std::string& what,
                    CtScheme* s) {
  if (!w.is_object()) {
    return InvalidArgument(what + " is " + Show(w) + "; loom needs weight quantization (an object)");
  }
  RETURN_IF_ERROR(CheckKeys(w, {"num_bits", "type", "symmetric", "group_size", "strategy",
                                "block_structure", "dynamic", "actorder", "scale_dtype",
                                "zp_dtype", "observer", "observer_kwargs"}, what));
  RETURN_IF_ERROR(Expect(w, "type", "int", what, "\"int\" weights (not float8/fp4)"));
  const json sym = w.contains("symmetric") ? w["symmetric"] : json(true);
  if (sym != json(true)) {
    return InvalidArgument(what + ": symmetric is " + Show(sym) +
                           "; asymmetric weights (zero points) are not supported, only symmetric");
  }
  if (!IsNullOrEmpty(w, "dynamic")) {
    return InvalidArgument(what + ": dynamic is " + Show(w["dynamic"]) + "; weights must be static");
  }
  if (!IsNullOrEmpty(w, "block_structure")) {
    return InvalidArgument(what + ": block_structure is " + Show(w["block_structure"]) +
                           "; block quantization is not supported");
  }
  // actorder "weight" (alias "static") changes only how GPTQ calibrates, not the format;
  // "group"/"dynamic" store a g_idx permutation, which the int4 kernel cannot follow.
  if (w.contains("actorder") && !w["actorder"].is_null() && w["actorder"] != json(false) &&
      w["actorder"] != json("weight") && w["actorder"] != json("static")) {
    return InvalidArgument(what + ": actorder is " + Show(w["actorder"]) +
                           "; activation-ordered groups (g_idx) are not supported (null, \"weight\" "
                           "and \"static\" are)");
  }
  if (format == "pack-quantized") {
    RETURN_IF_ERROR(Expect(w, "num_bits", 4, what, "num_bits 4 with pack-quantized"));
    RETURN_IF_ERROR(Expect(w, "strategy", "group", what,
                           "strategy \"group\" (group_size 32, 64 or 128) with pack-quantized"));
    const json g = w.contains("group_size") ? w["group_size"] : json();
    if (g != json(32) && g != json(64) && g != json(128)) {
      return InvalidArgument(what + ": group_size is " + Show(g) +
                             "; loom's int4 kernels take groups of 32, 64 or 128");
    }
    s->kind = CtScheme::Kind::kInt4Group;
    s->group_size = g.get<int>();
  } else {  // int-quantized / naive-quantized
    RETURN_IF_ERROR(Expect(w, "num_bits", 8, what, "num_bits 8 with " + format));
    RETURN_IF_ERROR(Expect(w, "strategy", "channel", what,
                           "strategy \"channel\" (per output row) with " + format));
    if (!IsNullOrEmpty(w, "group_size")) {
      return InvalidArgument(what + ": group_size is " + Show(w["group_size"]) +
                             "; channel strategy has no groups");
    }
    s->kind = CtScheme::Kind::kInt8Channel;
  }
  return OkStatus();
}

// Input activations: none (weight-only), or int8 dynamic per token, symmetric — what loom's
// kernels do at run time (per row, scale max|x|/127).
Status ParseInputs(const json& a, const std::string& what) {
  if (a.is_null()) return OkStatus();
  if (!a.is_object()) return InvalidArgument(what + " is " + Show(a) + "; expected an object or null");
  RETURN_IF_ERROR(CheckKeys(a, {"num_bits", "type", "symmetric", "group_size", "strategy",
                                "block_structure", "dynamic", "actorder", "scale_dtype",
                                "zp_dtype", "observer", "observer_kwargs"}, what));
  const std::string sup = "dynamic symmetric int8 per-token activations";
  RETURN_IF_ERROR(Expect(a, "type", "int", what, sup));
  RETURN_IF_ERROR(Expect(a, "num_bits", 8, what, sup));
  RETURN_IF_ERROR(Expect(a, "strategy", "token", what, sup));
  RETURN_IF_ERROR(Expect(a, "dynamic", true, what, sup + " (static input scales are not)"));
  const json sym = a.contains("symmetric") ? a["symmetric"] : json(true);
  if (sym != json(true)) return InvalidArgument(what + ": symmetric is " + Show(sym) + "; loom supports " + sup);
  for (const char* f : {"group_size", "block_structure", "actorder"}) {
    if (!IsNullOrEmpty(a, f)) return InvalidArgument(what + ": " + f + " is " + Show(a[f]) + "; loom supports " + sup);
  }
  return OkStatus();
}

}  // namespace

StatusOr<CtConfig> CtConfig::Parse(const json& qc, const std::string& where) {
  const std::string what = where + ": quantization_config";
  if (!qc.is_object()) return InvalidArgument(what + " is " + Show(qc) + ", not an object");
  std::string method;
  RETURN_IF_ERROR(GetString(qc, "quant_method", what, &method));
  if (method != "compressed-tensors") {
    return InvalidArgument(what + ": quant_method '" + method +
                           "' is not supported (loom reads pre-quantized compressed-tensors, "
                           "gptq and awq checkpoints)");
  }
  RETURN_IF_ERROR(CheckKeys(qc, {"quant_method", "format", "config_groups", "ignore",
                                 "quantization_status", "kv_cache_scheme", "sparsity_config",
                                 "transform_config", "moe_sparsity_config",
                                 "global_compression_ratio", "version"}, what));
  for (const char* f : {"kv_cache_scheme", "sparsity_config", "transform_config", "moe_sparsity_config"}) {
    if (!IsNullOrEmpty(qc, f)) {
      return InvalidArgument(what + ": " + f + " is " + Show(qc[f]) + "; not supported (must be null or empty)");
    }
  }
  std::string status = "compressed";
  RETURN_IF_ERROR(GetOptionalString(qc, "quantization_status", what, &status));
  if (status != "compressed") {
    return InvalidArgument(what + ": quantization_status is '" + status +
                           "'; loom reads only compressed checkpoints (\"compressed\")");
  }
  std::string global_format;
  RETURN_IF_ERROR(GetOptionalString(qc, "format", what, &global_format));
  if (!qc.contains("config_groups") || !qc["config_groups"].is_object() || qc["config_groups"].empty()) {
    return InvalidArgument(what + ": config_groups is missing or empty");
  }
  CtConfig c;
  c.where_ = where;
  for (auto it = qc["config_groups"].begin(); it != qc["config_groups"].end(); ++it) {
    const std::string gw = what + ".config_groups." + it.key();
    const json& g = it.value();
    if (!g.is_object()) return InvalidArgument(gw + " is " + Show(g) + ", not an object");
    RETURN_IF_ERROR(CheckKeys(g, {"targets", "weights", "input_activations", "output_activations",
                                  "format"}, gw));
    std::string format = global_format;
    RETURN_IF_ERROR(GetOptionalString(g, "format", gw, &format));
    if (format != "int-quantized" && format != "naive-quantized" && format != "pack-quantized") {
      return InvalidArgument(gw + ": format '" + format +
                             "' is not supported (loom reads int-quantized W8A8 and pack-quantized "
                             "W4A16)");
    }
    CtScheme s;
    s.group_name = it.key();
    RETURN_IF_ERROR(ParseWeights(g.contains("weights") ? g["weights"] : json(), format, gw + ".weights", &s));
    RETURN_IF_ERROR(ParseInputs(g.contains("input_activations") ? g["input_activations"] : json(),
                                gw + ".input_activations"));
    if (!IsNullOrEmpty(g, "output_activations")) {
      return InvalidArgument(gw + ": output_activations is " + Show(g["output_activations"]) +
                             "; output quantization is not supported");
    }
    if (!g.contains("targets") || !g["targets"].is_array() || g["targets"].empty()) {
      return InvalidArgument(gw + ": targets is missing or empty");
    }
    // Each target is compared with every other and with every projection's name: bounded.
    if (g["targets"].size() + c.targets_.size() > kMaxCtTargets) {
      return InvalidArgument(gw + ": more than " + std::to_string(kMaxCtTargets) + " targets");
    }
    const int index = static_cast<int>(c.schemes_.size());
    c.schemes_.push_back(s);
    for (const json& t : g["targets"]) {
      if (!t.is_string()) return InvalidArgument(gw + ": targets has " + Show(t) + ", not a string");
      Target target{t.get<std::string>(), std::nullopt, index};
      if (target.text.starts_with("re:")) {
        ASSIGN_OR_RETURN(Regex r, Regex::Compile(target.text.substr(3), gw + " target"));
        target.regex = std::move(r);
      }
      // A later group naming the same target replaces it (compressed-tensors' dict of targets).
      if (!target.regex && target.text != "Linear") {  // a module name: looked up, not scanned
        c.target_names_[target.text] = index;
        continue;
      }
      std::erase_if(c.targets_, [&](const Target& x) { return x.text == target.text; });
      c.targets_.push_back(std::move(target));
    }
  }
  // compressed-tensors' priority: exact names (target_names_), then regexes (each by sorted
  // target text), then the class name ("Linear" matches only as a class, last).
  auto rank = [](const Target& t) { return t.regex ? 1 : (t.text == "Linear" ? 2 : 0); };
  std::stable_sort(c.targets_.begin(), c.targets_.end(), [&](const Target& a, const Target& b) {
    return rank(a) != rank(b) ? rank(a) < rank(b) : a.text < b.text;
  });
  if (qc.contains("ignore") && !qc["ignore"].is_null()) {
    if (!qc["ignore"].is_array()) return InvalidArgument(what + ": ignore is " + Show(qc["ignore"]) + ", not a list");
    if (qc["ignore"].size() > kMaxCtIgnore) {
      return InvalidArgument(what + ": ignore has more than " + std::to_string(kMaxCtIgnore) + " entries");
    }
    for (const json& t : qc["ignore"]) {
      if (!t.is_string()) return InvalidArgument(what + ": ignore has " + Show(t) + ", not a string");
      Target target{t.get<std::string>(), std::nullopt, -1};
      if (target.text.starts_with("re:")) {
        ASSIGN_OR_RETURN(Regex r, Regex::Compile(target.text.substr(3), what + ".ignore"));
        target.regex = std::move(r);
      }
      if (!target.regex && target.text != "Linear") {  // a module name: a set lookup per module
        c.ignore_names_.insert(std::move(target.text));
        continue;
      }
      c.ignore_.push_back(std::move(target));
    }
  }
  return c;
}

StatusOr<std::optional<CtConfig>> CtConfig::Load(const std::string& dir) {
  const std::string path = dir + "/config.json";
  ASSIGN_OR_RETURN(std::string text, ReadFileBounded(path, kMaxConfigFileBytes));
  ASSIGN_OR_RETURN(json j, ParseJson(text, path));
  if (!j.is_object() || !j.contains("quantization_config") || j["quantization_config"].is_null()) {
    return std::optional<CtConfig>();
  }
  ASSIGN_OR_RETURN(CtConfig c, Parse(j["quantization_config"], path));
  return std::optional<CtConfig>(std::move(c));
}

bool CtConfig::Matches(const Target& t, const std::string& name) {
  if (t.regex) return t.regex->PrefixMatch(name);  // Python re.match
  return t.text == name || t.text == "Linear";     // every projection is an nn.Linear
}

// A config of tens of thousands of plain names (ignore lists every expert of a large MoE) is
// looked up per projection, not compared with each: 196k projections × 65k names was minutes.
const CtScheme* CtConfig::Find(const std::string& name) const {
  if (ignore_names_.count(name) != 0) return nullptr;
  for (const Target& t : ignore_) {
    if (Matches(t, name)) return nullptr;
  }
  if (auto it = target_names_.find(name); it != target_names_.end()) {
    return &schemes_[static_cast<size_t>(it->second)];
  }
  for (const Target& t : targets_) {
    if (Matches(t, name)) return &schemes_[static_cast<size_t>(t.scheme)];
  }
  return nullptr;
}

Status CtConfig::CheckTargets(const std::vector<std::string>& linear_names) const {
  const std::unordered_set<std::string> names(linear_names.begin(), linear_names.end());
  for (const auto& [text, scheme] : target_names_) {  // sorted: the first bad one is named
    if (names.count(text) == 0) {
      return InvalidArgument(where_ + ": quantization_config.config_groups." +
                             schemes_[static_cast<size_t>(scheme)].group_name + ": target '" +
                             text + "' is neither the class \"Linear\", a \"re:\" pattern, nor a "
                             "projection of this model (loom quantizes linear projections only)");
    }
  }
  return OkStatus();
}

}  // namespace loom
