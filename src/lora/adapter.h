// Adapter: a loaded PEFT LoRA adapter in canonical form — per (layer, module) A, B, scale, DoRA gain.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "io/safetensors.h"
#include "lora/lora_config.h"
#include "lora/site_table.h"

namespace loom {

// One adapted projection: y += scale·(x·Aᵀ)·Bᵀ (+ scale·bias), or the DoRA form.
struct LoraWeights {
  Tensor a;                  // [rank, in_features], file dtype (a view into the adapter file)
  Tensor b;                  // [out_features, rank], file dtype
  Tensor b_panels;           // B packed for the expand kernels (tensor/lora_panels.h), file dtype
  std::vector<uint8_t> b_panels_storage;
  std::vector<float> bias;   // [out_features] lora_B bias (lora_bias), or empty
  std::vector<float> dora_gain;  // [out_features] magnitude / ‖W + scale·B·A‖ per row, or empty
  float scale = 0;
  int rank = 0;
  double alpha = 0;          // lora_alpha / alpha_pattern's value for it (as PEFT matches it)
  std::string module_path;   // "model.layers.3.self_attn.q_proj"
};

// Embedding LoRA: e[t] += scale · B · A[:, t]; with DoRA then e[t] ⊙= dora_gain.
struct LoraEmbedding {
  std::vector<float> a_t;  // [vocab, rank] f32 (A transposed so a token's column is contiguous)
  std::vector<float> b;    // [model_dim, rank] f32
  // [model_dim] magnitude / ‖E[:, i] + scale·(B·A)[i, :]‖ over the vocabulary (PEFT's DoRA on an
  // embedding: a norm per embedding dimension), or empty.
  std::vector<float> dora_gain;
  float scale = 0;
  int rank = 0;
};

// Thread-safety: immutable after LoadAdapter; shared by every sequence that uses it.
class Adapter {
 public:
  const std::string& name() const { return name_; }
  const std::string& dir() const { return dir_; }
  uint64_t content_hash() const { return content_hash_; }  // identity: hash of the files' bytes
  // The same files under this process's secret key (SipHash; never 0): what the engine keys
  // cached prefixes by, and counts distinct adapters per step (--max-loras) by. Same bytes,
  // same identity, in this process.
  uint64_t cache_identity() const { return cache_identity_; }
  const LoraConfig& config() const { return config_; }
  // The weights for site `site` of the model's SiteTable (Linear::site), or null.
  const LoraWeights* Find(int site) const {
    return site >= 0 && static_cast<size_t>(site) < by_site_.size() ? by_site_[static_cast<size_t>(site)].get()
                                                                    : nullptr;
  }
  const LoraEmbedding* embedding() const { return embedding_.get(); }
  // Every adapted projection (for inspect and merge).
  std::vector<const LoraWeights*> modules() const;
  uint64_t tensor_bytes() const { return tensor_bytes_; }  // the A/B tensors' bytes, as in the file
  // Memory the loaded adapter holds: its file read in, B packed into panels, f32 copies
  // (embedding, bias, DoRA gains, per-expert cuts). What --max-cpu-lora-memory bounds.
  uint64_t resident_bytes() const { return resident_bytes_; }
  int max_rank() const { return max_rank_; }

 private:
  friend StatusOr<std::shared_ptr<const Adapter>> ReadAdapter(const std::string&, const std::string&,
                                                              const SiteTable&, int, bool);
  std::string name_;
  std::string dir_;
  uint64_t content_hash_ = 0;
  uint64_t cache_identity_ = 0;
  LoraConfig config_;
  std::unique_ptr<SafetensorsStore> store_;  // owns the in-memory copy the A/B views point into
  // Per-expert A/B cut from PEFT's fused expert LoRA (target_parameters), by derived name.
  std::map<std::string, Tensor> derived_;
  std::vector<std::unique_ptr<std::vector<uint8_t>>> derived_storage_;
  std::vector<std::unique_ptr<LoraWeights>> by_site_;  // [sites.size()], null = not adapted
  std::unique_ptr<LoraEmbedding> embedding_;
  uint64_t tensor_bytes_ = 0;
  uint64_t resident_bytes_ = 0;
  int max_rank_ = 0;
};

// True when applying the adapter changes no output: every module's scale is 0 or its lora_B
// (and lora_B bias) all zero, and no DoRA magnitude. LoadAdapter warns on stderr for such.
bool ChangesNothing(const Adapter& adapter);

// What a loaded adapter's config says that loading did not act on, as notes on stderr: the
// config keys loom does not know (ignored; SPEC-adapters: a debug log) and a
// base_model_name_or_path whose last part is not the served model folder's name (a warning
// only: the shapes matched). Each distinct note once per process (the first 256).
void NoteAdapterConfig(const Adapter& adapter, const std::string& model_dir);
// A model folder's name as base_model_name_or_path is compared with it: the last part of its
// absolute path, lowercased ("." in /models/Qwen2.5-0.5B → "qwen2.5-0.5b").
std::string ModelFolderName(const std::string& path);
// Whether the config's base_model_name_or_path (a hub id or a path) ends in another name than
// the model folder's (case aside): the warning NoteAdapterConfig and `loom inspect` give.
bool TrainedOnAnotherBase(const LoraConfig& config, const std::string& model_dir);

// Loads and validates DIR/adapter_config.json + DIR/adapter_model.safetensors against the base
// model's projections `sites` (Model::sites()): every tensor consumed, every A with its B, shapes
// and ranks checked, at least one module attached. `max_rank` 0 = no limit. `check_weights`: every tensor is scanned for
// NaN/±Inf. Errors start with "adapter 'NAME': ". A config regex (target_modules, exclude_modules,
// rank_pattern, alpha_pattern) that hits its step limit on a module name is an error, whatever
// else the load found.
StatusOr<std::shared_ptr<const Adapter>> LoadAdapter(const std::string& name, const std::string& dir,
                                                     const SiteTable& sites, int max_rank,
                                                     bool check_weights = true);

// 64-bit content hash of bytes (identity, not security).
uint64_t HashBytes(const void* data, size_t size, uint64_t seed);

}  // namespace loom
