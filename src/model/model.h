// Model: a loaded Llama-family checkpoint and its forward pass over a Batch.
#pragma once

#include <initializer_list>
#include <memory>
#include <string>

#include "base/status.h"
#include "io/safetensors.h"
#include "model/batch.h"
#include "model/config.h"
#include "model/kv_cache.h"
#include "model/weights.h"

namespace loom {

struct LoadOptions {
  // Every F32/F16/BF16 tensor in the files is scanned for NaN/±Inf at load (a bad checkpoint
  // would otherwise be served as garbage tokens); costs one read of the weights.
  bool check_weights = true;
  // Quantize every projection's weight at load (kInt8: per-row symmetric int8 weights, W8A8;
  // kInt4: group-wise symmetric int4 weights with f16 scales per `quantize_group` inputs, W4A8;
  // activations quantized to int8 per row at run time; kNf4 / kFp4: bitsandbytes' 4-bit
  // quantize_4bit, blocks of 64, bit for bit the checkpoint transformers would save with
  // load_in_4bit — QLoRA's base — served as that checkpoint is: f32 activations, merges and DoRA
  // norms over the dequantized weight). The output head too when quantize_head. Mixture-of-experts
  // routers stay dense (IsMoeRouter), and so do the experts under kNf4 / kFp4 (as
  // transformers 5's load_in_4bit: its experts are fused parameters, not Linear modules); kInt4
  // takes Int4GroupOf(…, quantize_group) per projection (a smaller group where quantize_group
  // does not divide its inputs; dense where 32 does not).
  enum class Quantization { kNone, kInt8, kInt4, kNf4, kFp4 } quantize = Quantization::kNone;
  int quantize_group = 128;  // kInt4: 32 or 128
  bool quantize_double_quant = false;  // kNf4 / kFp4: bnb_4bit_use_double_quant (QLoRA's usual)
  bool quantize_head = false;
  // How the departures note names the scheme and group flags (loom quantize: --scheme and
  // --group-size).
  std::string quantize_flag = "--quantize";
  std::string quantize_group_flag = "--quantize-group-size";
};

// Thread-safety: Load from any thread; Forward from one thread at a time (it owns scratch
// buffers and uses the global worker pool).
class Model {
 public:
  // `dir`: a Hugging Face checkpoint folder (config.json + safetensors, sharded or not).
  static StatusOr<std::unique_ptr<Model>> Load(const std::string& dir,
                                               const LoadOptions& options = {});
  ~Model();

  const ModelConfig& config() const { return config_; }
  const ModelWeights& weights() const { return weights_; }
  // The projections adapters may target (LoadAdapter's argument).
  const SiteTable& sites() const { return sites_; }
  const std::string& dir() const { return dir_; }
  // Longrope: a sequence computes with the short factors while it has at most this many
  // tokens and with the long ones beyond, for every position (as a full transformers forward
  // does). The engine recomputes a sequence's K/V when it crosses. 0 = no such switch.
  int rope_switch_length() const {
    return config_.rope.scaling == RopeScaling::kLongRope ? config_.rope.original_max_position : 0;
  }
  uint64_t weight_bytes() const { return store_->total_bytes(); }

  // Folds `adapter` into the weights (merged mode): adapted projections get owned merged
  // copies in the weight dtype, one at a time; embedding/lm_head LoRA on tied embeddings
  // unties them (each side keeps its own weights, as unmerged). Then Forward needs no adapter.
  Status MergeAdapter(const Adapter& adapter);
  const SafetensorsStore& store() const { return *store_; }

  // A cache sized for `num_tokens` positions in all. Never null: when the memory cannot be had
  // (see CheckKvCacheTokens, which callers run first) the cache has no blocks, so every request
  // is refused with kResourceExhausted instead of the process aborting.
  std::unique_ptr<KvCache> NewKvCache(int num_tokens, KvDtype dtype = KvDtype::kF32) const;
  // The pre-quantized checkpoint format ("compressed-tensors"), or empty for a dense checkpoint.
  // Its quantized projections have no dense weight: MergeAdapter folds an adapter into a
  // dequantized f32 copy of each projection it adapts (served dense from then on).
  const std::string& prequantized() const { return prequantized_; }
  // Where LoadOptions::quantize departed from what it asked, for labels: e.g. "g64 on 11, dense on
  // 50" (other int4 groups, projections left dense); empty when every projection took it.
  const std::string& quantize_departures() const { return quantize_departures_; }
  // Bytes of quantized weights made by LoadOptions::quantize or read pre-quantized (0 when none).
  uint64_t quantized_bytes() const { return quantized_bytes_; }
  // Every dense bf16 projection (lm_head included) also as AMX tiles, and its file pages let go
  // (ops/matmul.h AmxPackedWeight): for batch-invariant serving on an AMX CPU, where those
  // matmuls all run on AMX. A no-op elsewhere; call after any MergeAdapter (it drops the packed
  // copy of each projection it changes). Returns the bytes packed.
  StatusOr<uint64_t> PackWeightsForAmx();
  // Whether a KV cache of `num_tokens` positions is possible: at most kMaxKvCacheTokens, and its
  // bytes within this machine's physical memory. The error names the sizes.
  Status CheckKvCacheTokens(int64_t num_tokens, KvDtype dtype = KvDtype::kF32) const;
  // Whether a forward step of `rows` token rows over contexts of up to `context` positions can
  // have its working memory (activations of every projection's width per row, attention scores
  // per thread) within this machine's physical memory: config.json's widths multiply these (a
  // 64 MB checkpoint with 1024 heads of 2048 needed 16 MB a row and aborted on the allocation).
  Status CheckStepMemory(int64_t rows, int64_t context) const;
  static constexpr int64_t kMaxKvCacheTokens = int64_t{1} << 26;

  // Runs every row of `batch`, writing its K/V into `cache`, and returns the logits of
  // batch.logit_rows: logits [logit_rows.size(), vocab_size] f32. Rows of batch.segments
  // with a slot ≥ 0 run with adapters[slot].
  void Forward(const Batch& batch, KvCache* cache, float* logits,
               const std::vector<const Adapter*>* adapters = nullptr);

 private:
  struct Scratch;
  Model() = default;
  void ForwardLayer(int layer, const Batch& batch, KvCache* cache, const LoraBatch& lora,
                    Scratch& s);

  // The RoPE cos/sin of every row of this forward for `inv_freq` (each chunk with its sequence's
  // longrope factor set), built on first use and kept in the scratch for the other layers.
  struct RopeTable {  // [n, rotary_dim / 2] each, for inv_freq
    const std::vector<float>* inv_freq = nullptr;
    std::vector<float> cos, sin;
  };
  const RopeTable& RopeTableFor(const Batch& batch, const std::vector<float>& inv_freq,
                                Scratch& s) const;
  // Fused projection (qkv_proj, gate_up_proj): one matmul into `fused` [n, Σ widths], then
  // its column blocks copied out to `parts`.
  static void SplitColumns(const float* fused, int64_t n,
                           std::initializer_list<std::pair<float*, int64_t>> parts);

  void AddEmbeddingLora(const Batch& batch, const std::vector<const Adapter*>& adapters,
                        float* x) const;

  std::string dir_;
  ModelConfig config_;
  std::unique_ptr<SafetensorsStore> store_;  // owns the mmap'd bytes weights_ point into
  ModelWeights weights_;
  SiteTable sites_;
  std::vector<Linear*> site_linears_;  // [sites_.size()]: the Linear of each site (merge)
  std::vector<float> inv_freq_;        // [head_dim / 2]
  std::vector<float> inv_freq_local_;  // [head_dim / 2] layers with local_rope (Gemma 3)
  float embed_scale_ = 0;              // config embed_scale in the embedding dtype; 0 = none
  std::vector<float> inv_freq_long_;   // [rotary_dim / 2], longrope's long factors
  float rope_scale_ = 1.0f;            // longrope attention factor on cos/sin
  std::unique_ptr<Scratch> scratch_;
  std::vector<std::unique_ptr<AlignedBuffer<uint8_t>>> owned_;  // merged weights
  Status Quantize(const LoadOptions& options);
  uint64_t quantized_bytes_ = 0;
  std::string prequantized_;
  std::string quantize_departures_;
};

}  // namespace loom
