// SiteTable: the projections (and the embedding) a loaded model offers to adapters, by HF module path.
#pragma once

#include <cstdint>
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
  // After a merge replaced a base weight's bytes.
  void SetWeight(int i, Tensor weight) { sites_[static_cast<size_t>(i)].weight = weight; }

  // Index of the site with module path `path`, or -1.
  int Find(const std::string& path) const;
  const LinearSite& site(int i) const { return sites_[static_cast<size_t>(i)]; }
  int size() const { return static_cast<int>(sites_.size()); }
  const std::string& embedding_path() const { return embedding_path_; }
  const Tensor& embedding() const { return embedding_; }
  const std::string& architecture() const { return architecture_; }
  // The distinct last path components, in first-seen order ("embed_tokens", "q_proj", ...,
  // "lm_head"): what an error lists as the modules an adapter may target. `all_linear_only`:
  // just those of sites "all-linear" includes.
  std::vector<std::string> LeafNames(bool all_linear_only = false) const;

 private:
  std::vector<LinearSite> sites_;
  std::unordered_map<std::string, int> by_path_;
  std::string embedding_path_;
  Tensor embedding_;
  std::string architecture_;
};

}  // namespace loom
