// Model forward: the Llama-family layer loop, reading like the paper
// (norm → qkv → rope → attention → o; norm → gate/up → silu·mul → down), with the seams
// Gemma 2/3 configure (output norms, GeGLU, score/logit soft-capping, per-layer RoPE).
#include "model/model.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

#include "base/check.h"
#include "base/mmap_file.h"
#include "base/regex.h"
#include "base/thread_pool.h"
#include "lora/adapter.h"
#include "lora/merge.h"
#include "model/registry.h"
#include "ops/attention.h"
#include "ops/basic_ops.h"
#include "ops/rope.h"
#include "tensor/finite.h"

namespace loom {

struct Model::Scratch {
  AlignedBuffer<float> x;     // [n, model_dim] residual stream
  AlignedBuffer<float> h;     // [n, model_dim] normed input of a block
  AlignedBuffer<float> q;     // [n, num_heads*head_dim]
  AlignedBuffer<float> k;     // [n, num_kv_heads*head_dim]
  AlignedBuffer<float> v;     // [n, num_kv_heads*head_dim]
  AlignedBuffer<float> attn;  // [n, num_heads*head_dim]
  AlignedBuffer<float> out;   // [n, model_dim] block output
  AlignedBuffer<float> gate;  // [n, ffn_dim]
  AlignedBuffer<float> up;    // [n, ffn_dim]
  AlignedBuffer<float> last;  // [num_logit_rows, model_dim]
  AlignedBuffer<float> fused;  // [n, q_dim + 2·kv_dim] or [n, 2·ffn_dim] (fused projections)
  // Each row's RoPE cos and sin, [n, rotary_dim / 2] each, computed once per forward for every
  // inverse-frequency set it uses (Gemma 3: global and local) and reused by all layers.
  RopeTable rope[2];
};

Model::~Model() = default;

StatusOr<std::unique_ptr<Model>> Model::Load(const std::string& dir, const LoadOptions& options) {
  // Review finding: "" was read as /config.json (the root folder's).
  if (dir.empty()) return InvalidArgument("the model folder path is empty (--model \"\")");
  std::unique_ptr<Model> m(new Model());
  m->dir_ = dir;
  ASSIGN_OR_RETURN(m->config_, LoadModelConfig(dir));
  ASSIGN_OR_RETURN(m->store_, SafetensorsStore::Open(dir));
  if (options.check_weights) RETURN_IF_ERROR(CheckStoreFinite(*m->store_, ""));
  // quantization_config.quant_method picks the reader: bitsandbytes (model/bnb.h), gptq / awq
  // (model/gptq.h), else compressed-tensors (which rejects any other method by name).
  ASSIGN_OR_RETURN(std::optional<BnbConfig> bnb, BnbConfig::Load(dir));
  std::optional<GptqConfig> gptq;
  std::optional<CtConfig> quant;
  if (!bnb) {
    ASSIGN_OR_RETURN(gptq, GptqConfig::Load(dir));
  }
  if (!bnb && !gptq) {
    ASSIGN_OR_RETURN(quant, CtConfig::Load(dir));
  }
  if (bnb) {
    m->prequantized_ = bnb->bits == 8 ? std::string("bitsandbytes LLM.int8")
                                      : std::string("bitsandbytes ") + cpu::Bnb4TypeName(bnb->type);
  }
  if (gptq) m->prequantized_ = gptq->Name();
  if (quant) m->prequantized_ = "compressed-tensors";
  if (options.quantize_double_quant && options.quantize != LoadOptions::Quantization::kNf4 &&
      options.quantize != LoadOptions::Quantization::kFp4) {
    return InvalidArgument("--quantize-double-quant applies to --quantize nf4 or fp4 only");
  }
  // Review finding: these were accepted and did nothing.
  if (options.quantize_head && options.quantize == LoadOptions::Quantization::kNone) {
    return InvalidArgument("--quantize-head applies with --quantize int8|int4|nf4|fp4 only");
  }
  if (options.quantize_group != 128 && options.quantize != LoadOptions::Quantization::kInt4) {
    return InvalidArgument("--quantize-group-size " + std::to_string(options.quantize_group) +
                           " applies to --quantize int4 only");
  }
  if (!m->prequantized_.empty() && options.quantize != LoadOptions::Quantization::kNone) {
    return InvalidArgument(dir + ": --quantize on a pre-quantized (" + m->prequantized_ + ") "
                           "checkpoint; its projections are already quantized, serve it without "
                           "--quantize");
  }
  {
    // compressed-tensors targets/ignore and bitsandbytes skip patterns are matched here: one that
    // hits its step limit is an error, not a projection silently left dense or quantized.
    RegexLimitScope limits;
    Status st = LoadWeights(m->config_, *m->store_, &m->weights_, &m->sites_, &m->site_linears_,
                            quant ? &*quant : nullptr, &m->quantized_bytes_, gptq ? &*gptq : nullptr,
                            bnb ? &*bnb : nullptr);
    RETURN_IF_ERROR(limits.status());
    RETURN_IF_ERROR(st);
  }
  const ArchEntry* arch = FindArchitecture(m->config_.architecture);
  if (arch && arch->prepare_weights) RETURN_IF_ERROR(arch->prepare_weights(m->config_, &m->weights_));
  if (options.quantize != LoadOptions::Quantization::kNone) RETURN_IF_ERROR(m->Quantize(options));
  m->inv_freq_ = RopeInverseFrequencies(m->config_.rope, m->config_.head_dim);
  m->inv_freq_local_ = RopeInverseFrequencies(m->config_.rope_local, m->config_.head_dim);
  if (m->config_.embed_scale != 0) {  // transformers casts the scale to the embedding dtype
    float rounded = 0;
    const DType dt = m->weights_.embed.dtype;
    std::vector<uint8_t> bytes(DTypeSize(dt));
    ConvertFromF32(dt, &m->config_.embed_scale, bytes.data(), 1);
    ConvertToF32(dt, bytes.data(), &rounded, 1);
    m->embed_scale_ = rounded;
  }
  if (m->config_.rope.scaling == RopeScaling::kLongRope) {
    m->inv_freq_long_ = RopeInverseFrequencies(m->config_.rope, m->config_.head_dim, true);
    m->rope_scale_ = static_cast<float>(m->config_.rope.attention_factor);
  }
  // Values that pass the config's own checks (> 0 in double) can still underflow in float: a
  // rope_theta of 1e-300, a scaling factor of 1e-300 or original_max_position_embeddings 1 gave
  // Inf/NaN frequencies, and every request failed at its first token.
  for (const auto* freqs : {&m->inv_freq_, &m->inv_freq_local_, &m->inv_freq_long_}) {
    for (float f : *freqs) {
      if (!std::isfinite(f) || f < 0) {
        return InvalidArgument(dir + "/config.json: the RoPE parameters (rope_theta, rope_scaling / "
                               "rope_parameters) give a frequency of " + std::to_string(f) +
                               "; check their values");
      }
    }
  }
  if (!std::isfinite(m->rope_scale_) || m->rope_scale_ <= 0) {
    return InvalidArgument(dir + "/config.json: the RoPE attention factor is " +
                           std::to_string(m->rope_scale_) + " (original_max_position_embeddings?)");
  }
  m->scratch_ = std::make_unique<Scratch>();
  return m;
}

Status Model::Quantize(const LoadOptions& options) {
  const bool bnb4 = options.quantize == LoadOptions::Quantization::kNf4 ||
                    options.quantize == LoadOptions::Quantization::kFp4;
  const bool int4 = options.quantize == LoadOptions::Quantization::kInt4;
  if (int4 && options.quantize_group != 32 && options.quantize_group != 128) {
    return InvalidArgument("--quantize-group-size " + std::to_string(options.quantize_group) +
                           ": int4 groups are 32 or 128 inputs");
  }
  std::map<int, std::vector<std::string>> other_groups;  // int4 group ≠ quantize_group → projections
  // Projections left dense: MoE routers, experts (nf4/fp4; int4 where no group fits both their
  // widths), int4 where no group of 32 fits.
  std::vector<std::string> routers, experts, unfit;
  for (Linear* lin : site_linears_) {
    if (lin == &weights_.lm_head && !options.quantize_head) continue;
    if (IsMoeRouter(weights_, lin)) {  // routers stay dense (model/weights.h)
      routers.push_back(lin->name);
      continue;
    }
    // transformers 5 holds a MoE's experts as fused parameters, not Linear modules: load_in_4bit
    // leaves them in the checkpoint's dtype, and so does loom's replay of it.
    if (bnb4 && IsMoeExpert(weights_, lin)) {
      experts.push_back(lin->name);
      continue;
    }
    if (bnb4) {
      ASSIGN_OR_RETURN(std::unique_ptr<Nf4Weight> q,
                       QuantizeWeightBnb4(lin->weight, lin->name,
                                          options.quantize == LoadOptions::Quantization::kFp4
                                              ? cpu::Bnb4Type::kFp4
                                              : cpu::Bnb4Type::kNf4,
                                          64, options.quantize_double_quant));
      quantized_bytes_ += q->bytes();
      lin->nf4 = std::move(q);
    } else if (options.quantize == LoadOptions::Quantization::kInt4) {
      const int group = Int4GroupOf(weights_, lin, options.quantize_group);
      if (group == 0) {  // no group of 32 fits: dense (model/weights.h)
        (IsMoeExpert(weights_, lin) ? experts : unfit).push_back(lin->name);
        continue;
      }
      if (group != options.quantize_group) other_groups[group].push_back(lin->name);
      ASSIGN_OR_RETURN(std::unique_ptr<Int4Weight> q, QuantizeWeightInt4(lin->weight, lin->name, group));
      quantized_bytes_ += q->bytes();
      lin->int4 = std::move(q);
    } else {
      ASSIGN_OR_RETURN(std::unique_ptr<Int8Weight> q, QuantizeWeightInt8(lin->weight, lin->name));
      quantized_bytes_ += q->bytes();
      lin->int8 = std::move(q);
    }
    // int8/int4: the file's copy is read again only by a merge or a DoRA norm. bitsandbytes 4-bit:
    // from here on the projection is what a load_in_4bit checkpoint's is — no dense weight;
    // merges and DoRA norms read the dequantized one.
    if (lin->weight.data != weights_.embed.data) ReleaseMappedPages(lin->weight.data, lin->weight.nbytes());
    if (bnb4) {
      lin->weight = Tensor{DType::kF32, {lin->out_features(), lin->in_features()}, nullptr};
      SetQuantizedSiteRows(*lin, &sites_);
    }
  }
  // Say where the weights are not what the flag asked (loom quantize writes the same).
  const char* flag = int4 ? "int4" : bnb4 ? "nf4/fp4" : "int8";
  quantize_departures_.clear();
  for (const auto& [group, names] : other_groups) {
    quantize_departures_ += (quantize_departures_.empty() ? "g" : ", g") + std::to_string(group) +
                            " on " + std::to_string(names.size());
    std::fprintf(stderr,
                 "note: %s %s: %zu projection(s) take int4 groups of %d (%s %d does not "
                 "divide their inputs), e.g. %s\n",
                 options.quantize_flag.c_str(), flag, names.size(), group,
                 options.quantize_group_flag.c_str(), options.quantize_group,
                 names.front().c_str());
  }
  if (const size_t dense = routers.size() + experts.size() + unfit.size(); dense > 0) {
    quantize_departures_ += (quantize_departures_.empty() ? "dense on " : ", dense on ") + std::to_string(dense);
  }
  for (const auto& [names, why] : {std::pair{&routers, "mixture-of-experts routers, as vLLM and llama.cpp keep them"},
                                    std::pair{&experts, bnb4 ? "experts, as transformers 5's load_in_4bit leaves them"
                                                             : "experts: no int4 group of 32 divides both their input widths"},
                                    std::pair{&unfit, "no int4 group of 32 divides their inputs"}}) {
    if (names->empty()) continue;
    std::fprintf(stderr, "note: %s %s: %zu projection(s) stay dense (%s), e.g. %s\n",
                 options.quantize_flag.c_str(), flag, names->size(), why, names->front().c_str());
  }
  return OkStatus();
}

StatusOr<uint64_t> Model::PackWeightsForAmx() {
  uint64_t bytes = 0;
  for (Linear* lin : site_linears_) {
    if (lin->int8 || lin->int4 || lin->nf4 || !AmxPackable(lin->weight)) continue;
    if (!lin->amx) {
      // The file's copy is read again only by a merge, a DoRA norm, a non-AMX path or (a tied
      // lm_head's) the embedding lookup of a few rows: its pages are let go as they are packed.
      ASSIGN_OR_RETURN(std::unique_ptr<AmxPackedWeight> p,
                       PackWeightForAmx(lin->weight, lin->name, /*release_source=*/true));
      lin->amx = std::move(p);
    }
    bytes += lin->amx->bytes();
  }
  return bytes;
}

Status Model::MergeAdapter(const Adapter& adapter) {
  Status alloc_error;
  auto own = [&](const Tensor& like) -> void* {
    auto buf = std::make_unique<AlignedBuffer<uint8_t>>();
    Status st = buf->Resize(like.nbytes());
    if (!st.ok()) {
      alloc_error = st;
      return nullptr;
    }
    owned_.push_back(std::move(buf));
    return owned_.back()->data();
  };
  // A merged table or weight [rows, cols] past its dtype's range: refused, as `loom merge`
  // refuses it (review finding: it was served, and every request then failed on NaN logits
  // while the server said ready).
  auto check_finite = [&](const std::string& what, const Tensor& like, const void* data,
                          const char* row_word, const char* why) -> Status {
    const int64_t bad = FindNonFinite(like.dtype, data, like.numel());
    if (bad < 0) return OkStatus();
    const int64_t cols = like.dim(1);
    return InvalidArgument("--merge '" + adapter.name() + "': the merged " + what + " (" +
                           ShapeString(like.shape) + " " + DTypeName(like.dtype) +
                           ") is not finite at " + row_word + " " + std::to_string(bad / cols) +
                           ", column " + std::to_string(bad % cols) + " (" + why + ")");
  };
  int dequantized = 0;
  for (const LoraWeights* lw : adapter.modules()) {
    const int site = sites_.Find(lw->module_path);
    LOOM_CHECK(site >= 0);  // LoadAdapter matched it against this table
    Linear* lin = site_linears_[static_cast<size_t>(site)];
    const DType weight_dtype = lin->weight.dtype;
    void* merged = nullptr;
    if (lin->weight.data == nullptr) {
      // Pre-quantized: the adapter folds into a dequantized f32 copy (scale · q), and this
      // projection is served dense from then on; the others stay quantized.
      const auto& row = sites_.site(site).dequantized_row;
      LOOM_CHECK(row);
      float* dense = static_cast<float*>(own(lin->weight));  // [out, in] f32
      if (dense == nullptr) return ResourceExhausted("merging " + lw->module_path + ": " + alloc_error.message());
      for (int64_t j = 0; j < lin->out_features(); ++j) row(j, dense + j * lin->in_features());
      lin->weight.data = dense;
      lin->int8.reset();
      lin->int4.reset();
      lin->nf4.reset();
      ++dequantized;
      merged = dense;  // merged in place (row by row: each row is read whole before it is
                       // written), so one f32 copy of the projection, not two
    }
    if (merged == nullptr) merged = own(lin->weight);
    if (merged == nullptr) return ResourceExhausted("merging " + lw->module_path + ": " + alloc_error.message());
    MergeLinearWeight(lin->weight, *lw, merged);
    RETURN_IF_ERROR(check_finite("weight of " + lw->module_path, lin->weight, merged, "row",
                                 "weight + delta overflows the dtype, or the base weight is not "
                                 "finite"));
    lin->weight.data = merged;  // lm_head of a tied model now has its own copy
    lin->amx.reset();           // packed from the base weight: PackWeightsForAmx packs it again
    sites_.SetWeight(site, lin->weight);
    if (lin->int8) {  // quantized base: the merged weight is quantized again
      ASSIGN_OR_RETURN(std::unique_ptr<Int8Weight> q, QuantizeWeightInt8(lin->weight, lin->name));
      lin->int8 = std::move(q);
    }
    if (lin->int4) {
      ASSIGN_OR_RETURN(std::unique_ptr<Int4Weight> q,
                       QuantizeWeightInt4(lin->weight, lin->name, lin->int4->group));
      lin->int4 = std::move(q);
    }
    if (!lw->bias.empty()) {  // lora_bias: scale·b_B joins the base bias (zero if none)
      // Rounded to the dtype the checkpoint holds the bias in (none: the weight's), as `loom
      // merge` writes it and PEFT's merge in that dtype stores it: --merge and a merged
      // checkpoint give the same bits.
      const DType round_to = lin->bias.empty() ? weight_dtype : lin->bias_dtype;
      lin->bias_dtype = round_to;
      lin->bias.resize(static_cast<size_t>(lin->out_features()), 0.0f);
      for (size_t j = 0; j < lin->bias.size(); ++j) lin->bias[j] += lw->scale * lw->bias[j];
      if (round_to == DType::kBF16 || round_to == DType::kF16) {
        std::vector<uint16_t> narrow(lin->bias.size());
        const auto n = static_cast<int64_t>(lin->bias.size());
        ConvertFromF32(round_to, lin->bias.data(), narrow.data(), n);
        ConvertToF32(round_to, narrow.data(), lin->bias.data(), n);
      }
      if (const int64_t bad =
              FindNonFinite(DType::kF32, lin->bias.data(), static_cast<int64_t>(lin->bias.size()));
          bad >= 0) {
        return InvalidArgument("--merge '" + adapter.name() + "': the merged bias of " +
                               lw->module_path + " is not finite at " + std::to_string(bad) +
                               " (bias + scale · lora_B bias overflows f32)");
      }
    }
  }
  if (dequantized > 0) {
    std::fprintf(stderr, "note: merging '%s' into the %s base: %d adapted projection(s) now run on "
                 "dequantized f32 weights with the adapter folded in; the rest stay quantized\n",
                 adapter.name().c_str(),
                 prequantized_.empty() ? "quantized" : prequantized_.c_str(), dequantized);
  }
  if (const LoraEmbedding* e = adapter.embedding()) {
    void* merged = own(weights_.embed);
    if (merged == nullptr) return ResourceExhausted("merging the embedding: " + alloc_error.message());
    MergeEmbedding(weights_.embed, *e, merged);
    RETURN_IF_ERROR(check_finite("embedding", weights_.embed, merged, "token",
                                 "weight + delta overflows the dtype"));
    weights_.embed.data = merged;  // a tied lm_head keeps the base table
    sites_.SetEmbedding(sites_.embedding_path(), weights_.embed);
  }
  return OkStatus();
}

std::unique_ptr<KvCache> Model::NewKvCache(int num_tokens, KvDtype dtype) const {
  const int blocks = num_tokens > 0 ? KvCache::BlocksFor(num_tokens) : 0;
  auto cache =
      KvCache::Create(config_.num_layers, config_.num_kv_heads, config_.head_dim, blocks, dtype);
  if (cache.ok()) return std::move(cache).value();
  std::fprintf(stderr, "warning: %s; the KV cache is empty\n", cache.status().message().c_str());
  auto empty =
      KvCache::Create(config_.num_layers, config_.num_kv_heads, config_.head_dim, 0, dtype);
  LOOM_CHECK(empty.ok());
  return std::move(empty).value();
}

namespace {
uint64_t PhysicalMemoryBytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES);
  const long page_size = ::sysconf(_SC_PAGESIZE);
  return pages > 0 && page_size > 0 ? uint64_t(pages) * uint64_t(page_size) : UINT64_MAX;
}
}  // namespace

Status Model::CheckStepMemory(int64_t rows, int64_t context) const {
  const ModelConfig& c = config_;
  if (rows < 1 || context < 0) {
    return InvalidArgument("a step of " + std::to_string(rows) + " rows over " +
                           std::to_string(context) + " positions");
  }
  // Floats a row takes in Forward's scratch (x, h, out; q and the attention output; k, v; gate,
  // up; a fused projection's output) plus the widest projection's activations again (the
  // matmuls' packed or quantized copies). Each width is bounded in config.h (heads × head_dim ≤
  // 2^21), so no product below overflows 64 bits.
  const uint64_t d = static_cast<uint64_t>(c.model_dim);
  const uint64_t q = static_cast<uint64_t>(c.num_heads) * static_cast<uint64_t>(c.head_dim);
  const uint64_t kv = static_cast<uint64_t>(c.num_kv_heads) * static_cast<uint64_t>(c.head_dim);
  const uint64_t ffn = static_cast<uint64_t>(c.ffn_dim);
  const uint64_t fused = std::max(q + 2 * kv, 2 * ffn);
  const uint64_t widest = std::max({d, q, ffn});
  const uint64_t per_row = 4 * (3 * d + 2 * q + 2 * kv + 2 * ffn + fused + 2 * widest);
  const uint64_t group = c.num_kv_heads > 0 ? static_cast<uint64_t>(c.num_heads / c.num_kv_heads) : 1;
  const uint64_t threads = static_cast<uint64_t>(std::max(1, ThreadPool::Global().num_threads()));
  const uint64_t scores = 4 * static_cast<uint64_t>(context) * group * threads;
  // At most half the machine: the weights and the KV cache need the rest (no real model comes
  // near it: Llama-3-70B's 512-row step is ~430 MiB).
  const uint64_t memory = PhysicalMemoryBytes() / 2;
  const uint64_t r = static_cast<uint64_t>(rows);
  if (per_row > memory / r || per_row * r > memory - std::min(memory, scores)) {
    return ResourceExhausted(
        "a forward step of " + std::to_string(rows) + " token rows needs " +
        std::to_string((per_row >> 10) * r >> 10) + " MiB of working memory (" +
        std::to_string(per_row >> 10) + " KiB a row from config.json: hidden_size " +
        std::to_string(c.model_dim) + ", " + std::to_string(c.num_heads) + " heads of " +
        std::to_string(c.head_dim) + ", intermediate_size " + std::to_string(c.ffn_dim) +
        ") plus " + std::to_string(scores >> 20) + " MiB of attention scores, more than half "
        "of this machine's " + std::to_string((memory * 2) >> 20) + " MiB of memory");
  }
  return OkStatus();
}

Status Model::CheckKvCacheTokens(int64_t num_tokens, KvDtype dtype) const {
  if (dtype == KvDtype::kBf16 && config_.head_dim % 2 != 0) {
    return InvalidArgument("--kv-cache-dtype bfloat16 needs an even head_dim; this model's is " +
                           std::to_string(config_.head_dim));
  }
  if (num_tokens < 0 || num_tokens > kMaxKvCacheTokens) {
    return InvalidArgument("KV cache of " + std::to_string(num_tokens) +
                           " tokens is outside [0, " + std::to_string(kMaxKvCacheTokens) + "]");
  }
  const auto bytes = KvCache::BytesFor(config_.num_layers, config_.num_kv_heads, config_.head_dim,
                                       num_tokens, dtype);
  const uint64_t memory = PhysicalMemoryBytes();
  if (!bytes || *bytes > memory) {
    return ResourceExhausted(
        "KV cache of " + std::to_string(num_tokens) + " tokens needs " +
        (bytes ? std::to_string(*bytes >> 20) + " MiB" : std::string("more than 2^64 bytes")) +
        ", more than this machine's " + std::to_string(memory >> 20) + " MiB of memory");
  }
  return OkStatus();
}

void Model::ForwardLayer(int layer, const Batch& batch, KvCache* cache, const LoraBatch& lora,
                         Scratch& s) {
  const ModelConfig& c = config_;
  const LayerWeights& w = weights_.layers[static_cast<size_t>(layer)];
  const int64_t n = batch.num_rows();
  const int64_t d = c.model_dim;
  const int hd = c.head_dim;

  // Attention block.
  RmsNorm(s.x.data(), n, d, w.input_norm.data(), c.rms_norm_eps, s.h.data());
  if (c.fused_qkv) {
    const int64_t q_dim = int64_t{c.num_heads} * hd, kv_dim = int64_t{c.num_kv_heads} * hd;
    w.qkv_proj.Forward(s.h.data(), n, s.fused.data(), lora);
    SplitColumns(s.fused.data(), n,
                 {{s.q.data(), q_dim}, {s.k.data(), kv_dim}, {s.v.data(), kv_dim}});
  } else if (!ForwardShared(
                 {{&w.q_proj, s.q.data()}, {&w.k_proj, s.k.data()}, {&w.v_proj, s.v.data()}},
                 s.h.data(), n, lora)) {  // one pass where it can (same bits)
    w.q_proj.Forward(s.h.data(), n, s.q.data(), lora);
    w.k_proj.Forward(s.h.data(), n, s.k.data(), lora);
    w.v_proj.Forward(s.h.data(), n, s.v.data(), lora);
  }
  if (c.qk_norm) {  // per head over head_dim
    RmsNorm(s.q.data(), n * c.num_heads, hd, w.q_norm.data(), c.rms_norm_eps, s.q.data());
    RmsNorm(s.k.data(), n * c.num_kv_heads, hd, w.k_norm.data(), c.rms_norm_eps, s.k.data());
  }
  const LayerConfig& lc = c.layers[static_cast<size_t>(layer)];
  const std::vector<float>& inv_freq = lc.local_rope ? inv_freq_local_ : inv_freq_;
  const RopeTable& rope = RopeTableFor(batch, inv_freq, s);
  const int half = static_cast<int>(inv_freq.size());
  ApplyRopeTable(s.q.data(), n, c.num_heads, hd, half, rope.cos.data(), rope.sin.data());
  ApplyRopeTable(s.k.data(), n, c.num_kv_heads, hd, half, rope.cos.data(), rope.sin.data());
  KvLayerView kv = cache->Layer(layer);
  WriteKv(kv, batch.chunks, s.k.data(), s.v.data());
  const float scale = c.attn_scale > 0 ? c.attn_scale : 1.0f / std::sqrt(static_cast<float>(hd));
  Attention(kv, batch.chunks, s.q.data(), c.num_heads, lc.sliding_window, scale, s.attn.data(),
            c.attn_softcap);
  w.o_proj.Forward(s.attn.data(), n, s.out.data(), lora);
  if (!w.attn_out_norm.empty()) {  // Gemma: the block output is normed before the residual add
    RmsNorm(s.out.data(), n, d, w.attn_out_norm.data(), c.rms_norm_eps, s.out.data());
  }
  AddInPlace(s.x.data(), s.out.data(), n * d);

  // MLP block.
  RmsNorm(s.x.data(), n, d, w.post_norm.data(), c.rms_norm_eps, s.h.data());
  if (c.layers[static_cast<size_t>(layer)].moe) {  // mixture of experts instead (arch/moe.cc)
    MoeForward(w.moe, c.moe, c.activation, s.h.data(), n, s.out.data(), lora);
    AddInPlace(s.x.data(), s.out.data(), n * d);
    return;
  }
  // SiLU(gate)·up in one pass into s.gate where the weights allow it (the same bits), else
  // gate and up, then the activation.
  const bool silu_done = c.activation == Activation::kSilu && !c.fused_gate_up &&
                         ForwardSiluMul(w.gate_proj, w.up_proj, s.h.data(), n, s.gate.data(), lora);
  if (!silu_done) {
    if (c.fused_gate_up) {  // gate columns first, then up (Phi3MLP's chunk(2))
      w.gate_up_proj.Forward(s.h.data(), n, s.fused.data(), lora);
      SplitColumns(s.fused.data(), n, {{s.gate.data(), c.ffn_dim}, {s.up.data(), c.ffn_dim}});
    } else {
      w.gate_proj.Forward(s.h.data(), n, s.gate.data(), lora);
      w.up_proj.Forward(s.h.data(), n, s.up.data(), lora);
    }
    GatedActivationInPlace(c.activation, s.gate.data(), s.up.data(), n * c.ffn_dim);
  }
  w.down_proj.Forward(s.gate.data(), n, s.out.data(), lora);
  if (!w.ffn_out_norm.empty()) {
    RmsNorm(s.out.data(), n, d, w.ffn_out_norm.data(), c.rms_norm_eps, s.out.data());
  }
  AddInPlace(s.x.data(), s.out.data(), n * d);
}

const Model::RopeTable& Model::RopeTableFor(const Batch& batch, const std::vector<float>& inv_freq,
                                            Scratch& s) const {
  for (const auto& t : s.rope) {
    if (t.inv_freq == &inv_freq) return t;
  }
  RopeTable& t = s.rope[s.rope[0].inv_freq == nullptr ? 0 : 1];
  LOOM_CHECK(t.inv_freq == nullptr);  // at most two sets (global, local) per forward
  const int64_t n = batch.num_rows();
  const size_t half = inv_freq.size();
  t.cos.resize(static_cast<size_t>(n) * half);
  t.sin.resize(static_cast<size_t>(n) * half);
  t.inv_freq = &inv_freq;
  if (inv_freq_long_.empty()) {
    RopeAngles(n, batch.positions.data(), inv_freq, rope_scale_, t.cos.data(), t.sin.data());
    return t;
  }
  // longrope: each chunk with its sequence's factor set (long past the switch length).
  const int switch_len = rope_switch_length();
  for (size_t i = 0; i < batch.chunks.size(); ++i) {
    const AttentionChunk& ch = batch.chunks[i];
    const int len =
        i < batch.context_lens.size() ? batch.context_lens[i] : ch.start_pos + ch.num_rows;
    const size_t off = static_cast<size_t>(ch.first_row) * half;
    RopeAngles(ch.num_rows, batch.positions.data() + ch.first_row,
               len > switch_len ? inv_freq_long_ : inv_freq, rope_scale_, t.cos.data() + off,
               t.sin.data() + off);
  }
  return t;
}

void Model::SplitColumns(const float* fused, int64_t n,
                         std::initializer_list<std::pair<float*, int64_t>> parts) {
  int64_t width = 0;
  for (const auto& p : parts) width += p.second;
  for (int64_t r = 0; r < n; ++r) {
    const float* src = fused + r * width;
    for (const auto& [dst, w] : parts) {
      std::copy(src, src + w, dst + r * w);
      src += w;
    }
  }
}

// Same as PEFT's LoRA Embedding: e[t] += scale · B · A[:, t], before the embedding scaling
// (PEFT multiplies its delta by the base layer's embed_scale as well); DoRA then scales each
// dimension of the sum by its gain (PEFT: gain ⊙ base row + gain ⊙ delta, embed_scale after).
void Model::AddEmbeddingLora(const Batch& batch, const std::vector<const Adapter*>& adapters,
                             float* x) const {
  const int64_t d = config_.model_dim;
  for (const Segment& seg : batch.segments) {
    if (seg.adapter_slot < 0) continue;
    const Adapter* a = adapters[static_cast<size_t>(seg.adapter_slot)];
    const LoraEmbedding* e = a ? a->embedding() : nullptr;
    if (!e) continue;
    for (int r = seg.first_row; r < seg.first_row + seg.num_rows; ++r) {
      const float* at = e->a_t.data() + static_cast<size_t>(batch.tokens[static_cast<size_t>(r)]) * e->rank;
      float* xr = x + r * d;
      for (int64_t i = 0; i < d; ++i) {
        float acc = 0;
        for (int k = 0; k < e->rank; ++k) acc += e->b[static_cast<size_t>(i * e->rank + k)] * at[k];
        xr[i] += e->scale * acc;
      }
      if (!e->dora_gain.empty()) {
        for (int64_t i = 0; i < d; ++i) xr[i] *= e->dora_gain[static_cast<size_t>(i)];
      }
    }
  }
}

void Model::Forward(const Batch& batch, KvCache* cache, float* logits,
                    const std::vector<const Adapter*>* adapters) {
  const ModelConfig& c = config_;
  Scratch& s = *scratch_;
  const size_t n = static_cast<size_t>(batch.num_rows());
  const size_t d = static_cast<size_t>(c.model_dim);
  const size_t q_dim = static_cast<size_t>(c.num_heads) * c.head_dim;
  const size_t kv_dim = static_cast<size_t>(c.num_kv_heads) * c.head_dim;
  LOOM_CHECK_OK(s.x.Resize(n * d));
  LOOM_CHECK_OK(s.h.Resize(n * d));
  LOOM_CHECK_OK(s.q.Resize(n * q_dim));
  LOOM_CHECK_OK(s.k.Resize(n * kv_dim));
  LOOM_CHECK_OK(s.v.Resize(n * kv_dim));
  LOOM_CHECK_OK(s.attn.Resize(n * q_dim));
  LOOM_CHECK_OK(s.out.Resize(n * d));
  LOOM_CHECK_OK(s.gate.Resize(n * static_cast<size_t>(c.ffn_dim)));
  LOOM_CHECK_OK(s.up.Resize(n * static_cast<size_t>(c.ffn_dim)));
  if (c.fused_qkv || c.fused_gate_up) {
    LOOM_CHECK_OK(
        s.fused.Resize(n * std::max(q_dim + 2 * kv_dim, 2 * static_cast<size_t>(c.ffn_dim))));
  }

  EmbedRows(weights_.embed, batch.tokens.data(), static_cast<int64_t>(n), s.x.data());
  LoraBatch lora;
  if (adapters && !batch.segments.empty()) {
    lora.segments = &batch.segments;
    lora.adapters = adapters;
    AddEmbeddingLora(batch, *adapters, s.x.data());
  }
  // Gemma: PEFT scales the embedding LoRA delta by embed_scale too, so it scales the sum.
  if (embed_scale_ != 0) ScaleInPlace(s.x.data(), static_cast<int64_t>(n * d), embed_scale_);
  for (auto& t : s.rope) t.inv_freq = nullptr;  // this batch's positions: new tables
  for (int layer = 0; layer < c.num_layers; ++layer) ForwardLayer(layer, batch, cache, lora, s);

  // Only the rows whose logits are wanted pay for the final norm and the vocab projection.
  const int64_t num_out = static_cast<int64_t>(batch.logit_rows.size());
  if (num_out == 0) return;
  LOOM_CHECK_OK(s.last.Resize(static_cast<size_t>(num_out) * d));
  for (int64_t i = 0; i < num_out; ++i) {
    const size_t row = static_cast<size_t>(batch.logit_rows[static_cast<size_t>(i)]);
    std::copy(s.x.data() + row * d, s.x.data() + (row + 1) * d, s.last.data() + i * d);
  }
  RmsNorm(s.last.data(), num_out, c.model_dim, weights_.final_norm.data(), c.rms_norm_eps,
          s.last.data());
  // The head sees only the logit rows: re-express the segments over them.
  LoraBatch head_lora;
  std::vector<Segment> head_segments;
  if (lora.segments) {
    size_t seg = 0;
    for (int64_t i = 0; i < num_out; ++i) {
      const int row = batch.logit_rows[static_cast<size_t>(i)];
      while (seg < batch.segments.size() &&
             row >= batch.segments[seg].first_row + batch.segments[seg].num_rows) {
        ++seg;
      }
      const int slot = seg < batch.segments.size() ? batch.segments[seg].adapter_slot : -1;
      if (!head_segments.empty() && head_segments.back().adapter_slot == slot) {
        ++head_segments.back().num_rows;
      } else {
        head_segments.push_back({static_cast<int>(i), 1, slot});
      }
    }
    head_lora.segments = &head_segments;
    head_lora.adapters = adapters;
  }
  weights_.lm_head.Forward(s.last.data(), num_out, logits, head_lora);
  if (c.final_softcap > 0) SoftCapInPlace(logits, num_out * c.vocab_size, c.final_softcap);
}

}  // namespace loom
