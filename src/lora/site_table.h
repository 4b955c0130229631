// SiteTable: the projections (and the embedding) a loaded model offers to adapters, by HF module path.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <unordered_map>
#include <vector>

#include "tensor/tensor.h"

namespace loom {

// One linear projection an adapter may target.
struct LinearSite {
  std::string path;  // HF module path, e.g. "model.layers.3.self_attn.q_proj"
  Tensor weight;     // [out_features, in_features] base weight view (shapes, DoRA norms)
  int layer = -1;    // decoder layer index, or -1 outside the layers (lm_head)
  bool all_linear = true;  // whether PEFT's "all-linear" includes it (not the output head)
  // A pre-quantized projection (weight.data null): writes its dequantized row `j` ([in] f32,
  // exactly the values the kernels compute with) for DoRA norms. Empty for dense projections.
  std::function<void(int64_t j, float* row)> dequantized_row;
  // Where PEFT takes a DoRA norm over other values than dequantized_row's (bitsandbytes 4-bit:
  // dequantize_4bit in quant_state's dtype, e.g. bf16-rounded): that row. Else empty.
  std::function<void(int64_t j, float* row)> dora_norm_row;
};

// A 3-D expert parameter as transformers 5 holds it (e.g. "model.layers.0.mlp.experts.gate_up_proj"
// [E, 2I, H]); PEFT's target_parameters LoRA on it acts per expert on these sites, whose outputs
// are stacked in `parts` order (gate then up).
struct ExpertParamSite {
  std::string path;
  std::vector<std::vector<int>> parts;  // [expert][part] site indices
};

// Built by the model from its weight enumeration (model/weights.h): every projection of every
// architecture is a site, so lora/ needs no list of module names. Immutable after build.
class SiteTable {
 public:
  SiteTable() = default;
  // Appends a site; returns its index (what Linear::site holds).
  int Add(LinearSite site);
  void SetEmbedding(std::string path, Tensor table) {  // [vocab, model_dim]
    embedding_path_ = std::move(path);
    embedding_ = table;
  }
  void SetArchitecture(std::string name) { architecture_ = std::move(name); }
  // The module whose weight is the embedding table ("lm_head" when tie_word_embeddings), or "".
  void SetTiedHead(std::string path) { tied_head_path_ = std::move(path); }
  // After a merge replaced a base weight's bytes. A dense weight supersedes a pre-quantized one:
  // its row readers (which hold the quantized weight alive) are dropped.
  void SetWeight(int i, Tensor weight) {
    LinearSite& s = sites_[static_cast<size_t>(i)];
    s.weight = weight;
    if (weight.data != nullptr) {
      s.dequantized_row = nullptr;
      s.dora_norm_row = nullptr;
    }
  }
  // Site `i` is served from quantized weights only: `weight` shape-only, and its row readers.
  void SetQuantized(int i, Tensor weight, std::function<void(int64_t, float*)> dequantized_row,
                    std::function<void(int64_t, float*)> dora_norm_row) {
    LinearSite& s = sites_[static_cast<size_t>(i)];
    s.weight = weight;
    s.dequantized_row = std::move(dequantized_row);
    s.dora_norm_row = std::move(dora_norm_row);
  }
  // Whether PEFT's "all-linear" includes site `i` (architectures whose PEFT rules differ).
  void SetAllLinear(int i, bool all_linear) { sites_[static_cast<size_t>(i)].all_linear = all_linear; }

  // Index of the site with module path `path` (or an alias of it), or -1.
  int Find(const std::string& path) const;
  // Another module path for site `i` (transformers 5's in-memory name where the checkpoint's
  // differs, e.g. Mixtral's mlp.gate for block_sparse_moe.gate).
  void AddAlias(const std::string& path, int i) { by_path_.emplace(path, i); }
  void AddExpertParam(ExpertParamSite p) { expert_params_.push_back(std::move(p)); }
  // A module of the model that is neither a projection nor the embedding (a norm, a decoder
  // layer, an attention or MLP block, model itself): PEFT refuses a target that names one.
  void AddOtherModule(std::string path) { other_modules_.push_back(std::move(path)); }
  const std::vector<std::string>& other_modules() const { return other_modules_; }
  const std::vector<ExpertParamSite>& expert_params() const { return expert_params_; }
  const LinearSite& site(int i) const { return sites_[static_cast<size_t>(i)]; }
  int size() const { return static_cast<int>(sites_.size()); }
  const std::string& embedding_path() const { return embedding_path_; }
  const Tensor& embedding() const { return embedding_; }
  const std::string& architecture() const { return architecture_; }
  const std::string& tied_head_path() const { return tied_head_path_; }
  // The distinct last path components, in first-seen order ("embed_tokens", "q_proj", ...,
  // "lm_head"): what an error lists as the modules an adapter may target. `all_linear_only`:
  // just those of sites "all-linear" includes.
  std::vector<std::string> LeafNames(bool all_linear_only = false) const;

 private:
  std::vector<LinearSite> sites_;
  std::unordered_map<std::string, int> by_path_;
  std::vector<ExpertParamSite> expert_params_;
  std::vector<std::string> other_modules_;
  std::string embedding_path_;
  Tensor embedding_;
  std::string architecture_;
  std::string tied_head_path_;
};

}  // namespace loom
