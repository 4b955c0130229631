// LoadAdapter: PEFT tensor names → canonical per-module LoRA weights, with every check the spec asks.
#include "lora/adapter.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string_view>

#include "base/file.h"
#include "base/json.h"
#include "base/mmap_file.h"
#include "base/siphash.h"
#include "lora/dora_gains.h"
#include "lora/peft_moe.h"
#include "tensor/lora_panels.h"

namespace loom {

namespace fs = std::filesystem;

uint64_t HashBytes(const void* data, size_t size, uint64_t seed) {
  // 4 independent 64-bit lanes of multiply-xorshift mixing: memory-speed on large files.
  const auto* p = static_cast<const uint8_t*>(data);
  constexpr uint64_t kMul = 0x9E3779B97F4A7C15ull;
  uint64_t h[4] = {seed ^ size, seed + kMul, seed ^ 0xC2B2AE3D27D4EB4Full, seed - kMul};
  size_t i = 0;
  for (; i + 32 <= size; i += 32) {
    for (int l = 0; l < 4; ++l) {
      uint64_t w;
      std::memcpy(&w, p + i + 8 * l, 8);
      h[l] = (h[l] ^ w) * kMul;
      h[l] ^= h[l] >> 29;
    }
  }
  uint64_t out = h[0] ^ (h[1] * 3) ^ (h[2] * 5) ^ (h[3] * 7);
  for (; i < size; ++i) out = (out ^ p[i]) * kMul;
  out ^= out >> 32;
  return out * kMul;
}

namespace {

// Every element ±0 (f32, bf16 or f16 bits; other dtypes are not all-zero here).
bool AllZero(const Tensor& t) {
  const int64_t n = t.numel();
  if (t.dtype == DType::kF32) {
    const auto* p = static_cast<const uint32_t*>(t.data);
    for (int64_t i = 0; i < n; ++i) {
      if ((p[i] & 0x7fffffffu) != 0) return false;
    }
    return true;
  }
  if (t.dtype == DType::kBF16 || t.dtype == DType::kF16) {
    const auto* p = static_cast<const uint16_t*>(t.data);
    for (int64_t i = 0; i < n; ++i) {
      if ((p[i] & 0x7fffu) != 0) return false;
    }
    return true;
  }
  return false;
}

}  // namespace

bool ChangesNothing(const Adapter& adapter) {
  for (const LoraWeights* w : adapter.modules()) {
    if (!w->dora_gain.empty()) return false;  // DoRA's magnitude rescales even with B = 0
    if (w->scale == 0) continue;              // B and its bias are both scaled
    for (float b : w->bias) {
      if (b != 0) return false;
    }
    if (!AllZero(w->b)) return false;
  }
  if (const LoraEmbedding* e = adapter.embedding()) {
    if (!e->dora_gain.empty()) return false;
    if (e->scale == 0) return true;
    for (float b : e->b) {
      if (b != 0) return false;
    }
  }
  return true;
}

std::vector<const LoraWeights*> Adapter::modules() const {
  std::vector<const LoraWeights*> out;
  for (const auto& l : by_site_) {
    if (l) out.push_back(l.get());
  }
  return out;
}

namespace {

constexpr char kPrefix[] = "base_model.model.";
const char* const kLoraParts[] = {"lora_A", "lora_B", "lora_embedding_A", "lora_embedding_B",
                                  "lora_magnitude_vector"};

// The tensors an adapter file holds for one module path.
struct ModuleTensors {
  std::map<std::string, std::string> parts;  // "lora_A" / "lora_B" / "lora_B.bias" / ... → tensor name
};

std::vector<std::string> Split(const std::string& s) {
  std::vector<std::string> parts;
  size_t start = 0;
  for (size_t i = 0; i <= s.size(); ++i) {
    if (i == s.size() || s[i] == '.') {
      parts.push_back(s.substr(start, i - start));
      start = i + 1;
    }
  }
  return parts;
}

void ToF32Vector(const Tensor& t, std::vector<float>* out) {
  out->resize(static_cast<size_t>(t.numel()));
  ConvertToF32(t.dtype, t.data, out->data(), t.numel());
}

}  // namespace

// LoadAdapter without the regex step-limit check (a friend of Adapter).
StatusOr<std::shared_ptr<const Adapter>> ReadAdapter(const std::string& name, const std::string& dir,
                                                     const SiteTable& sites, int max_rank,
                                                     bool check_weights) {
  const std::string where = "adapter '" + name + "'";
  const fs::path folder(dir);
  const std::string config_path = (folder / "adapter_config.json").string();
  const std::string tensors_path = (folder / "adapter_model.safetensors").string();
  {
    auto is_dir = IsDirectory(dir);
    if (!is_dir.ok()) return Status(is_dir.status().code(), where + ": " + is_dir.status().message());
    if (!*is_dir) return NotFound(where + ": " + dir + " is not a folder");
  }
  auto has_tensors = RegularFileExists(tensors_path);
  if (!has_tensors.ok()) {
    return Status(has_tensors.status().code(), where + ": " + has_tensors.status().message());
  }
  auto has_bin = RegularFileExists((folder / "adapter_model.bin").string());
  if (!*has_tensors && !has_bin.ok()) {  // e.g. a link out of a --lora-dir root (confined)
    return Status(has_bin.status().code(), where + ": " + has_bin.status().message());
  }
  if (!*has_tensors && *has_bin) {
    return InvalidArgument(where + ": " + dir +
                           " has only adapter_model.bin, a pickle file that could run arbitrary "
                           "code when loaded; loom does not unpickle. Re-save the adapter with "
                           "safetensors (PeftModel.save_pretrained(..., safe_serialization=True))");
  }
  auto config_read = ReadFileBounded(config_path, kMaxConfigFileBytes);
  if (!config_read.ok()) {
    return Status(config_read.status().code(), where + ": " + config_read.status().message());
  }
  const std::string config_text = std::move(config_read).value();
  std::shared_ptr<Adapter> a(new Adapter());
  a->name_ = name;
  a->dir_ = dir;
  {
    auto parsed = ParseLoraConfig(config_text, config_path);
    if (!parsed.ok()) return InvalidArgument(where + ": " + parsed.status().message());
    a->config_ = std::move(parsed).value();
  }
  {
    Status st = ApplyPeftMoeAllLinear(sites, config_path, &a->config_);
    if (!st.ok()) return InvalidArgument(where + ": " + st.message());
  }
  if (!*has_tensors) {
    // As vLLM: a folder with an adapter config and no tensors is a broken adapter (400), not a
    // missing one (kNotFound, 404, is for a folder or adapter_config.json that is not there).
    return InvalidArgument(where + ": " + dir +
                           " has adapter_config.json but no adapter_model.safetensors");
  }
  // Read into memory, not mapped: an adapter file replaced or truncated while it is served (a
  // `cp` over it in a --lora-dir) would SIGBUS the server or change the weights in place.
  auto store = SafetensorsStore::Open(tensors_path, "model", /*in_memory=*/true);
  if (!store.ok()) return Status(store.status().code(), where + ": " + store.status().message());
  a->store_ = std::move(store).value();
  if (check_weights) RETURN_IF_ERROR(CheckStoreFinite(*a->store_, where + ": " + tensors_path));
  const LoraConfig& cfg = a->config_;
  if (cfg.use_dora && cfg.lora_bias) {
    return InvalidArgument(where + ": use_dora together with lora_bias is not supported yet");
  }

  // Group the file's tensors by module path.
  std::map<std::string, ModuleTensors> by_module;
  std::string adapter_key_name;  // embedded PEFT adapter name, e.g. "default"
  std::string first_lora_tensor;  // the tensor that set adapter_key_name (or its absence)
  std::vector<std::pair<std::string, std::string>> base_copies;  // (tensor, module path)
  for (const std::string& tensor : a->store_->names()) {
    std::string key = tensor;
    if (key.rfind(kPrefix, 0) == 0) key = key.substr(sizeof(kPrefix) - 1);
    const auto parts = Split(key);
    size_t at = parts.size();
    for (size_t i = 0; i < parts.size() && at == parts.size(); ++i) {
      for (const char* lp : kLoraParts) {
        if (parts[i] == lp) at = i;
      }
    }
    // PEFT saves targeted embeddings' base weight too (...embed_tokens.base_layer.weight): it
    // must equal the served model's; it is checked below and adds nothing.
    if (at == parts.size() && parts.size() >= 3 && parts[parts.size() - 2] == "base_layer" &&
        parts.back() == "weight") {
      base_copies.emplace_back(tensor, key.substr(0, key.size() - 18));
      continue;
    }
    if (at == parts.size() || at == 0) {
      return InvalidArgument(where + ": tensor " + tensor + " in " + tensors_path +
                             " is not a LoRA tensor (expected ...lora_A.weight / lora_B.weight / "
                             "lora_embedding_A / lora_embedding_B / lora_magnitude_vector)");
    }
    std::string module;
    for (size_t i = 0; i < at; ++i) module += (i ? "." : "") + parts[i];
    std::vector<std::string> rest(parts.begin() + static_cast<long>(at) + 1, parts.end());
    std::string part = parts[at];
    // Optional embedded adapter name: before weight/bias (lora_A.default.weight), or last for
    // the parts PEFT keeps in a ParameterDict (lora_embedding_A.default). Review finding: any
    // word was taken for a name, so ...lora_A.foo loaded as lora_A and ...lora_A.weight_extra
    // was reported as a duplicate of ...lora_A.weight.
    std::string name_here;
    if (!rest.empty() && rest.front() != "weight" && rest.front() != "bias") {
      const bool parameter_dict = part == "lora_embedding_A" || part == "lora_embedding_B" ||
                                  part == "lora_magnitude_vector";
      if (rest.size() == 1 && !parameter_dict) {
        return InvalidArgument(where + ": tensor " + tensor + " has an unexpected name (" + part +
                               " is followed by weight or bias, or by an adapter name and "
                               "then weight or bias)");
      }
      name_here = rest.front();
      rest.erase(rest.begin());
    }
    // One naming for the whole file: a tensor named for another adapter, or named where the
    // others are not, is not part of this adapter (PEFT would not load it as such).
    if (first_lora_tensor.empty()) {
      first_lora_tensor = tensor;
      adapter_key_name = name_here;
    } else if (name_here != adapter_key_name) {
      if (!name_here.empty() && !adapter_key_name.empty()) {
        return InvalidArgument(where + ": tensors name two adapters ('" + adapter_key_name +
                               "' and '" + name_here + "'); save one adapter per folder");
      }
      auto describe = [](const std::string& t, const std::string& n) {
        return t + (n.empty() ? " (no adapter name)" : " (adapter name '" + n + "')");
      };
      return InvalidArgument(where + ": tensors " + describe(first_lora_tensor, adapter_key_name) +
                             " and " + describe(tensor, name_here) +
                             " are named differently; save one adapter per folder");
    }
    if (rest.size() == 1 && rest[0] == "bias") {
      part += ".bias";
    } else if (!(rest.empty() || (rest.size() == 1 && rest[0] == "weight"))) {
      return InvalidArgument(where + ": tensor " + tensor + " has an unexpected name");
    }
    auto& slot = by_module[module].parts[part];
    if (!slot.empty()) {
      return InvalidArgument(where + ": tensors " + slot + " and " + tensor + " are the same weight");
    }
    slot = tensor;
  }
  if (by_module.empty()) {
    return InvalidArgument(where + ": " + tensors_path + " holds no tensors; the adapter would change nothing");
  }

  // PEFT's LoRA on transformers 5's fused expert parameters (target_parameters), saved as
  // ...mlp.experts[.base_layer].lora_A.weight [E·r, in] / lora_B.weight [Σout, E·r]: cut into
  // per-expert LoRAs on the expert sites (A_e = rows e·r…; B_e = columns e, E+e, …; the rows of
  // B_e split over the stacked parts, e.g. gate then up, which share A_e).
  std::set<std::string> expert_targeted;
  // The path PEFT matches rank_pattern / alpha_pattern against, where it is not the module path:
  // the expert parameter's (…mlp.experts.gate_up_proj) for a cut module, the parameter's
  // (…mlp.gate.weight) for a module adapted through target_parameters.
  std::map<std::string, std::string> pattern_key;
  for (auto it = by_module.begin(); it != by_module.end();) {
    const std::string& module = it->first;
    if (module == sites.embedding_path() || sites.Find(module) >= 0 || !it->second.parts.count("lora_A") ||
        !it->second.parts.count("lora_B")) {
      ++it;
      continue;
    }
    std::string owner = module;
    while (owner.ends_with(".base_layer")) owner.resize(owner.size() - 11);
    ASSIGN_OR_RETURN(Tensor fa, a->store_->Get(it->second.parts.at("lora_A")));
    ASSIGN_OR_RETURN(Tensor fb, a->store_->Get(it->second.parts.at("lora_B")));
    const ExpertParamSite* param = nullptr;
    for (const ExpertParamSite& p : sites.expert_params()) {
      if (!p.path.starts_with(owner + ".") || p.parts.empty() || fa.shape.size() != 2 || fb.shape.size() != 2) continue;
      const int64_t experts = static_cast<int64_t>(p.parts.size());
      int64_t out = 0;
      for (int s : p.parts[0]) out += sites.site(s).weight.dim(0);
      if (fa.shape[1] == sites.site(p.parts[0][0]).weight.dim(1) && fa.shape[0] % experts == 0 &&
          fb.shape[0] == out && fb.shape[1] == fa.shape[0]) {
        param = &p;
      }
    }
    if (!param) {
      ++it;  // reported below as a module the model does not have
      continue;
    }
    if (!cfg.TargetsParameter(param->path)) {
      return InvalidArgument(where + ": tensor " + it->second.parts.at("lora_A") + " adapts '" + param->path +
                             "', which target_parameters does not name");
    }
    if (it->second.parts.size() != 2) {
      return InvalidArgument(where + ": module '" + module + "' (LoRA on expert parameters) has tensors "
                             "other than lora_A/lora_B (PEFT allows no bias or DoRA there)");
    }
    const int64_t experts = static_cast<int64_t>(param->parts.size());
    const int64_t rank = fa.shape[0] / experts, in = fa.shape[1], out_all = fb.shape[0];
    if (rank != cfg.RankFor(param->path)) {
      return InvalidArgument(where + ": tensor " + it->second.parts.at("lora_A") + " has shape " +
                             ShapeString(fa.shape) + ", rank " + std::to_string(rank) + " per expert for " +
                             std::to_string(experts) + " experts, but r/rank_pattern give '" + param->path +
                             "' rank " + std::to_string(cfg.RankFor(param->path)));
    }
    const size_t es = DTypeSize(fa.dtype);
    if (DTypeSize(fb.dtype) != es) {
      return InvalidArgument(where + ": module '" + module + "' has lora_A and lora_B of different dtypes");
    }
    int64_t row0 = 0;
    for (size_t j = 0; j < param->parts[0].size(); ++j) {
      const int64_t out = sites.site(param->parts[0][j]).weight.dim(0);
      for (int64_t e = 0; e < experts; ++e) {
        const std::string site_path = sites.site(param->parts[static_cast<size_t>(e)][j]).path;
        const std::string tag = module + "#" + std::to_string(e) + "." + std::to_string(j);
        a->derived_[tag + ".lora_A"] =
            Tensor{fa.dtype, {rank, in}, static_cast<const uint8_t*>(fa.data) + e * rank * in * es};
        auto bytes = std::make_unique<std::vector<uint8_t>>(static_cast<size_t>(out * rank) * es);
        for (int64_t o = 0; o < out; ++o) {
          for (int64_t k = 0; k < rank; ++k) {
            std::memcpy(bytes->data() + (o * rank + k) * es,
                        static_cast<const uint8_t*>(fb.data) + ((row0 + o) * (experts * rank) + k * experts + e) * es, es);
          }
        }
        a->derived_[tag + ".lora_B"] = Tensor{fb.dtype, {out, rank}, bytes->data()};
        a->derived_storage_.push_back(std::move(bytes));
        auto& parts = by_module[site_path].parts;
        if (!parts.empty()) {
          return InvalidArgument(where + ": '" + site_path + "' is adapted twice (as a module and through " +
                                 param->path + ")");
        }
        parts["lora_A"] = tag + ".lora_A";
        parts["lora_B"] = tag + ".lora_B";
        expert_targeted.insert(site_path);
        pattern_key[site_path] = param->path;
      }
      row0 += out;
    }
    (void)out_all;
    it = by_module.erase(it);
  }

  // Which modules the config targets (PEFT's rules over this model's modules).
  const std::vector<std::string> linear_names = sites.LeafNames(/*all_linear_only=*/true);
  std::set<std::string> targeted;
  if (!sites.embedding_path().empty() && cfg.Targets(sites.embedding_path(), linear_names)) {
    targeted.insert(sites.embedding_path());
  }
  for (int i = 0; i < sites.size(); ++i) {
    if (cfg.Targets(sites.site(i).path, linear_names)) targeted.insert(sites.site(i).path);
  }
  targeted.insert(expert_targeted.begin(), expert_targeted.end());
  // ensure_weight_tying (PEFT 0.18+): an adapted embedding of a tied model adapts the head too,
  // its LoRA tied to the embedding's (A_head = B_emb^T, B_head = A_emb^T) and saved as lm_head's.
  if (cfg.ensure_weight_tying && !sites.tied_head_path().empty() &&
      targeted.count(sites.embedding_path()) && sites.Find(sites.tied_head_path()) >= 0) {
    targeted.insert(sites.tied_head_path());
  }
  // PEFT raises "Target module ... is not supported" for a matched module it cannot adapt (a
  // norm, a decoder layer, an MLP block); beside other targets such an entry was ignored here.
  for (const std::string& m : sites.other_modules()) {
    if (cfg.Targets(m, linear_names)) {
      return InvalidArgument(where + ": target_modules match '" + m + "', which " +
                             sites.architecture() +
                             " has as a norm or a block of modules, not a linear projection or "
                             "the embedding; PEFT refuses it (Target module ... is not supported)");
    }
  }
  // Per-expert modules (the v4 layout) of an expert parameter target_parameters names: PEFT fuses
  // them into that parameter's LoRA on load.
  std::set<std::string> param_covered;
  for (const ExpertParamSite& p : sites.expert_params()) {
    if (!cfg.TargetsParameter(p.path)) continue;
    bool cut = false, any = false, all = true;
    for (const auto& expert : p.parts) {
      for (int s : expert) {
        param_covered.insert(sites.site(s).path);
        cut = cut || expert_targeted.count(sites.site(s).path) > 0;
        const bool present = by_module.count(sites.site(s).path) > 0;
        any = any || present;
        all = all && present;
      }
    }
    if (!cut && !all) {
      return InvalidArgument(where + ": adapter_config.json targets '" + p.path + "' (target_parameters" +
                             (cfg.all_linear ? ", from all-linear" : "") + ") but " + tensors_path +
                             (any ? " has tensors for only some of its experts" : " has no tensors for it"));
    }
  }
  for (const auto& entry : by_module) {
    const int site = sites.Find(entry.first);
    if (site < 0 || expert_targeted.count(entry.first)) continue;
    const bool as_module = cfg.Targets(entry.first, linear_names);
    if (!as_module && cfg.TargetsParameter(entry.first + ".weight")) {  // a 2-D parameter LoRA (a router)
      targeted.insert(entry.first);
      pattern_key[entry.first] = entry.first + ".weight";
    } else if ((as_module && sites.site(site).path != entry.first) || param_covered.count(entry.first)) {
      targeted.insert(entry.first);  // by an alias path (Mixtral's mlp.gate), or a v4 expert module
    }
  }
  // A transformers 5 router (…mlp.gate) target_parameters names must have tensors too (under
  // that path or the checkpoint's, e.g. Mixtral's block_sparse_moe.gate).
  for (const ExpertParamSite& p : sites.expert_params()) {
    if (!p.path.ends_with(".experts.gate_up_proj")) continue;
    const std::string router = p.path.substr(0, p.path.size() - 21) + ".gate";
    const int site = sites.Find(router);
    if (site >= 0 && cfg.TargetsParameter(router + ".weight") && !by_module.count(router) &&
        !by_module.count(sites.site(site).path)) {
      return InvalidArgument(where + ": adapter_config.json targets '" + router + ".weight' (target_parameters" +
                             (cfg.all_linear ? ", from all-linear" : "") + ") but " + tensors_path +
                             " has no tensors for it");
    }
  }
  if (targeted.empty()) {
    // The targets are file text: quoted clipped and escaped (a list may hold megabytes).
    std::string targets = cfg.all_linear ? "all-linear" : "";
    if (cfg.target_regex) targets = "'" + cfg.target_regex->pattern() + "'";
    for (size_t i = 0; i < cfg.target_list.size() && targets.size() <= 200; ++i) {
      targets += (targets.empty() ? "" : ", ") + cfg.target_list[i];
    }
    targets = TextForMessage(targets);
    std::string leaves;
    for (const auto& leaf : sites.LeafNames()) leaves += (leaves.empty() ? "" : ", ") + leaf;
    return InvalidArgument(where + ": target_modules [" + targets + "] match no module of " +
                           sites.architecture() + " (its modules: " + leaves + ")");
  }
  for (const auto& entry : by_module) {
    // Plain references, not a structured binding: the lambdas below capture them (clang 14).
    const std::string& module = entry.first;
    const auto& t = entry.second;
    if (module != sites.embedding_path() && sites.Find(module) < 0) {
      return InvalidArgument(where + ": tensor " + t.parts.begin()->second + " adapts module '" +
                             module + "', which " + sites.architecture() + " does not have");
    }
    if (!targeted.count(module)) {
      return InvalidArgument(where + ": tensor " + t.parts.begin()->second + " adapts '" + module +
                             "', which adapter_config.json does not target");
    }
  }
  for (const auto& module : targeted) {
    if (!by_module.count(module)) {
      return InvalidArgument(where + ": adapter_config.json targets '" + module +
                             "' but " + tensors_path + " has no tensors for it");
    }
  }

  a->by_site_.resize(static_cast<size_t>(sites.size()));
  const int64_t vocab = sites.embedding().shape.size() == 2 ? sites.embedding().dim(0) : 0;
  const int64_t model_dim = sites.embedding().shape.size() == 2 ? sites.embedding().dim(1) : 0;
  for (const auto& entry : by_module) {
    // Plain references, not a structured binding: the lambdas below capture them (clang 14).
    const std::string& module = entry.first;
    const auto& t = entry.second;
    const bool embedding = module == sites.embedding_path();
    const int site = embedding ? -1 : sites.Find(module);
    const std::string& key = pattern_key.count(module) ? pattern_key.at(module) : module;
    const int rank = cfg.RankFor(key);
    const float scale = static_cast<float>(cfg.ScaleFor(key));
    auto get = [&](const std::string& part) -> StatusOr<Tensor> {
      auto it = t.parts.find(part);
      if (it == t.parts.end()) {
        return InvalidArgument(where + ": module '" + module + "' has " + t.parts.begin()->second +
                               " but no " + part + " tensor");
      }
      if (auto d = a->derived_.find(it->second); d != a->derived_.end()) return d->second;
      auto tensor = a->store_->Get(it->second);
      if (!tensor.ok()) return Status(tensor.status().code(), where + ": " + tensor.status().message());
      return tensor;
    };
    auto check_shape = [&](const Tensor& x, const std::string& part,
                           std::vector<int64_t> want) -> Status {
      if (x.shape != want) {
        return InvalidArgument(where + ": tensor " + t.parts.at(part) + " has shape " +
                               ShapeString(x.shape) + ", the base model needs " + ShapeString(want) +
                               " (adapter trained for another base model, or r/rank_pattern wrong)");
      }
      return OkStatus();
    };
    if (max_rank > 0 && rank > max_rank) {
      return InvalidArgument(where + ": rank " + std::to_string(rank) + " of '" + module +
                             "' exceeds --max-lora-rank " + std::to_string(max_rank));
    }
    a->max_rank_ = std::max(a->max_rank_, rank);
    if (embedding) {
      for (const auto& [part, tensor] : t.parts) {
        if (part == "lora_magnitude_vector" && cfg.use_dora) continue;
        if (part != "lora_embedding_A" && part != "lora_embedding_B") {
          return InvalidArgument(where + ": tensor " + tensor + " is not valid on an embedding");
        }
      }
      ASSIGN_OR_RETURN(Tensor ea, get("lora_embedding_A"));
      ASSIGN_OR_RETURN(Tensor eb, get("lora_embedding_B"));
      RETURN_IF_ERROR(check_shape(ea, "lora_embedding_A", {rank, vocab}));
      RETURN_IF_ERROR(check_shape(eb, "lora_embedding_B", {model_dim, rank}));
      auto e = std::make_unique<LoraEmbedding>();
      std::vector<float> af;
      ToF32Vector(ea, &af);
      e->a_t.resize(af.size());
      for (int k = 0; k < rank; ++k) {
        for (int64_t v = 0; v < vocab; ++v) {
          e->a_t[static_cast<size_t>(v) * rank + k] = af[static_cast<size_t>(k * vocab + v)];
        }
      }
      ToF32Vector(eb, &e->b);
      e->scale = scale;
      e->rank = rank;
      // As for a projection: use_dora without the magnitude was served as plain LoRA (review).
      if (cfg.use_dora && t.parts.count("lora_magnitude_vector") == 0) {
        return InvalidArgument(where + ": module '" + module +
                               "' has no lora_magnitude_vector but use_dora is true");
      }
      if (t.parts.count("lora_magnitude_vector")) {
        const Tensor& table = sites.embedding();
        if (table.data == nullptr || (table.dtype != DType::kF32 && table.dtype != DType::kBF16 &&
                                      table.dtype != DType::kF16)) {
          return InvalidArgument(
              where + ": module '" + module +
              "' is DoRA (use_dora) over an "
              "embedding table that is not f32, bf16 or f16: no weights to take its "
              "norm of");
        }
        ASSIGN_OR_RETURN(Tensor mag, get("lora_magnitude_vector"));
        RETURN_IF_ERROR(check_shape(mag, "lora_magnitude_vector", {model_dim}));
        std::vector<float> m;
        ToF32Vector(mag, &m);
        e->dora_gain = EmbeddingDoraGains(m, table, *e);
      }
      a->tensor_bytes_ += ea.nbytes() + eb.nbytes();
      a->embedding_ = std::move(e);
      continue;
    }
    for (const auto& [part, tensor] : t.parts) {
      if (part == "lora_embedding_A" || part == "lora_embedding_B") {
        return InvalidArgument(where + ": tensor " + tensor + " is an embedding LoRA on '" + module +
                               "', which is a linear projection");
      }
    }
    const Tensor& base_weight = sites.site(site).weight;  // [out, in]
    const int64_t in = base_weight.dim(1), out = base_weight.dim(0);
    auto w = std::make_unique<LoraWeights>();
    w->module_path = sites.site(site).path;  // the checkpoint path, also when named by an alias
    w->rank = rank;
    w->scale = scale;
    w->alpha = cfg.AlphaFor(key);
    ASSIGN_OR_RETURN(w->a, get("lora_A"));
    ASSIGN_OR_RETURN(w->b, get("lora_B"));
    RETURN_IF_ERROR(check_shape(w->a, "lora_A", {rank, in}));
    RETURN_IF_ERROR(check_shape(w->b, "lora_B", {out, rank}));
    a->tensor_bytes_ += w->a.nbytes() + w->b.nbytes();
    {  // B in the expand kernels' panels, same dtype (exact): a column block is one stream.
      const int64_t size = LoraPanelsSize(static_cast<int>(rank), out);
      w->b_panels_storage.resize(static_cast<size_t>(size) * DTypeSize(w->b.dtype));
      PackLoraPanels(w->b.dtype, w->b.data, static_cast<int>(rank), out, w->b_panels_storage.data());
      w->b_panels = Tensor{w->b.dtype, {size}, w->b_panels_storage.data()};
    }
    const bool has_bias = t.parts.count("lora_B.bias") > 0;
    if (has_bias != cfg.lora_bias) {
      return InvalidArgument(where + ": module '" + module + "' " +
                             (has_bias ? "has a lora_B.bias but lora_bias is false"
                                       : "has no lora_B.bias but lora_bias is true"));
    }
    if (has_bias) {
      ASSIGN_OR_RETURN(Tensor bias, get("lora_B.bias"));
      RETURN_IF_ERROR(check_shape(bias, "lora_B.bias", {out}));
      ToF32Vector(bias, &w->bias);
    }
    const bool has_mag = t.parts.count("lora_magnitude_vector") > 0;
    if (has_mag != cfg.use_dora) {
      return InvalidArgument(where + ": module '" + module + "' " +
                             (has_mag ? "has a lora_magnitude_vector but use_dora is false"
                                      : "has no lora_magnitude_vector but use_dora is true"));
    }
    const auto& dequantized_row = sites.site(site).dequantized_row;
    if (has_mag && base_weight.data == nullptr && !dequantized_row) {
      return InvalidArgument(where + ": module '" + module + "' is DoRA (use_dora) over a base "
                             "projection with no weights to take its norm of");
    }
    if (has_mag) {
      ASSIGN_OR_RETURN(Tensor mag, get("lora_magnitude_vector"));
      RETURN_IF_ERROR(check_shape(mag, "lora_magnitude_vector", {out}));
      std::vector<float> m, af, bf;
      ToF32Vector(mag, &m);
      ToF32Vector(w->a, &af);
      ToF32Vector(w->b, &bf);
      const size_t row_bytes = static_cast<size_t>(in) * DTypeSize(base_weight.dtype);
      const auto base_row = [&](int64_t o, float* dst) {
        if (base_weight.data == nullptr) {  // pre-quantized: PEFT's norm is over the dequantized W
          const auto& norm_row = sites.site(site).dora_norm_row;
          (norm_row ? norm_row : dequantized_row)(o, dst);
        } else {
          ConvertToF32(
              base_weight.dtype,
              static_cast<const uint8_t*>(base_weight.data) + static_cast<size_t>(o) * row_bytes,
              dst, in);
        }
      };
      w->dora_gain = DoraGains(m, af, bf, out, in, rank, scale, base_row);
    }
    a->by_site_[static_cast<size_t>(site)] = std::move(w);
  }

  for (const auto& [tensor, module] : base_copies) {
    const Tensor* base = nullptr;
    if (module == sites.embedding_path()) base = &sites.embedding();
    if (const int s = sites.Find(module); s >= 0 && !sites.site(s).all_linear) base = &sites.site(s).weight;
    if (!base) {
      return InvalidArgument(where + ": tensor " + tensor +
                             " replaces a base weight (modules_to_save-style); not supported yet");
    }
    if (base->data == nullptr) {
      return InvalidArgument(where + ": tensor " + tensor + " is a copy of the base weight of '" +
                             module + "', which is pre-quantized: nothing dense to compare it with");
    }
    ASSIGN_OR_RETURN(Tensor copy, a->store_->Get(tensor));
    std::vector<float> x(static_cast<size_t>(base->numel())), y(x.size());
    if (copy.shape != base->shape) {
      return InvalidArgument(where + ": tensor " + tensor + " has shape " + ShapeString(copy.shape) +
                             ", the base weight is " + ShapeString(base->shape));
    }
    ConvertToF32(base->dtype, base->data, x.data(), base->numel());
    ConvertToF32(copy.dtype, copy.data, y.data(), copy.numel());
    for (size_t i = 0; i < x.size(); ++i) {
      if (DTypeSize(copy.dtype) >= DTypeSize(base->dtype) ? x[i] != y[i] : std::fabs(x[i] - y[i]) > 1e-2f * (1 + std::fabs(x[i]))) {
        return InvalidArgument(where + ": tensor " + tensor +
                               " is a copy of the base weight that differs from the served model's "
                               "(adapter trained on another base model?)");
      }
    }
  }

  // Identity: the bytes of both files, the tensors' as mapped for the weights just validated (a
  // second open could see a file renamed over it since: an identity of other weights).
  uint64_t h = HashBytes(config_text.data(), config_text.size(), 0x6c6f6f6d);
  // The engine's identity (prefix-cache keys, distinct adapters per step) is keyed with the
  // process's secret: HashBytes is public and weak, so adapter files with equal content_hash
  // could be made; equal cache identities cannot.
  SipHasher keyed(ProcessSipKey());
  const uint64_t config_size = config_text.size();
  keyed.Update(&config_size, sizeof(config_size));
  keyed.Update(config_text.data(), config_text.size());
  uint64_t resident = 0;  // resident_bytes_: the files read in, then the copies made from them
  for (const auto& [bytes, size] : a->store_->file_bytes()) {
    h = HashBytes(bytes, size, h);
    const uint64_t file_size = size;
    keyed.Update(&file_size, sizeof(file_size));
    keyed.Update(bytes, size);
    resident += size;
  }
  a->content_hash_ = h;
  a->cache_identity_ = keyed.Final() | 1;  // never 0 (0 is the base model)
  for (const auto& w : a->by_site_) {
    if (w) resident += w->b_panels_storage.size() + (w->bias.size() + w->dora_gain.size()) * sizeof(float);
  }
  for (const auto& d : a->derived_storage_) resident += d->size();
  if (a->embedding_) {
    resident +=
        (a->embedding_->a_t.size() + a->embedding_->b.size() + a->embedding_->dora_gain.size()) *
        sizeof(float);
  }
  a->resident_bytes_ = resident;
  if (ChangesNothing(*a)) {
    // PEFT serves such an adapter too (an untrained one has B = 0), so it loads; but it is
    // said, as it is rarely what was meant.
    std::fprintf(stderr,
                 "warning: adapter '%s' (%s): every adapted module has scale 0 or an all-zero "
                 "lora_B, so the adapter changes nothing (saved before training?)\n",
                 name.c_str(), dir.c_str());
  }
  return std::shared_ptr<const Adapter>(std::move(a));
}

namespace {
// The last part of a path, lowercased ("/models/X/" → "x").
std::string LastPartLower(const fs::path& path) {
  const fs::path p = path.lexically_normal();
  std::string s = p.filename().string();
  if (s.empty()) s = p.parent_path().filename().string();
  for (char& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return s;
}
}  // namespace

std::string ModelFolderName(const std::string& path) {
  std::error_code ec;
  const fs::path p = fs::absolute(path, ec);
  return LastPartLower(ec ? fs::path(path) : p);
}

bool TrainedOnAnotherBase(const LoraConfig& config, const std::string& model_dir) {
  // base_model_name_or_path is a hub id ("Org/Name") or a path: its last part against the
  // folder's (a relative id is not resolved against the working folder: only its last part).
  const std::string& base = config.base_model_name_or_path;
  if (model_dir.empty() || base.empty()) return false;
  return LastPartLower(base) != ModelFolderName(model_dir);
}

void NoteAdapterConfig(const Adapter& adapter, const std::string& model_dir) {
  std::vector<std::string> notes;
  const LoraConfig& c = adapter.config();
  // File text quoted as messages quote it (printable ASCII, bounded): a key or name holding
  // terminal escapes never reaches the terminal as they are.
  if (!c.ignored_keys.empty()) {
    std::string keys;
    for (const auto& k : c.ignored_keys) keys += (keys.empty() ? "" : ", ") + KeyForMessage(k);
    notes.push_back("adapter_config.json keys loom does not know, ignored: " + keys.substr(0, 512));
  }
  if (TrainedOnAnotherBase(c, model_dir)) {
    notes.push_back("base_model_name_or_path '" +
                    PrintableAscii(std::string_view(c.base_model_name_or_path).substr(0, 256)) +
                    "' is not the served model's folder '" +
                    PrintableAscii(ModelFolderName(model_dir)) +
                    "' (a warning only: the shapes matched)");
  }
  static std::mutex mu;
  static std::set<std::string> said;
  std::lock_guard<std::mutex> lock(mu);
  for (const auto& n : notes) {
    if (said.size() >= 256 || !said.insert(n).second) continue;
    std::fprintf(stderr, "note: adapter '%s': %s\n", PrintableAscii(adapter.name()).c_str(),
                 n.c_str());
  }
}

StatusOr<std::shared_ptr<const Adapter>> LoadAdapter(const std::string& name, const std::string& dir,
                                                     const SiteTable& sites, int max_rank,
                                                     bool check_weights) {
  RegexLimitScope limits;  // a timed-out "no match" must not leave a module unadapted silently
  auto adapter = ReadAdapter(name, dir, sites, max_rank, check_weights);
  if (Status st = limits.status(); !st.ok()) {
    // Over the time budget: kResourceExhausted (still a 400), which the adapter store does not
    // keep as the folder's fault — an idle machine may match the same patterns in time.
    const std::string message = "adapter '" + name + "': " + st.message();
    return limits.over_time() ? ResourceExhausted(message) : InvalidArgument(message);
  }
  return adapter;
}

}  // namespace loom
