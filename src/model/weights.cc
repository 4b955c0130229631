// Weight enumeration, shape checks and the "every tensor consumed" rule.
#include "model/weights.h"

#include <algorithm>
#include <numeric>
#include <set>

#include "ops/basic_ops.h"
#include "ops/matmul_int4.h"

namespace loom {

void WeightList::Matrix(Linear* lin, const std::string& name, int64_t out, int64_t in, bool bias) {
  lin->name = name;
  slots.push_back({name + ".weight", {out, in}, true, &lin->weight, nullptr, lin, layer});
  if (bias)
    slots.push_back(
        {name + ".bias", {out}, true, nullptr, &lin->bias, nullptr, -1, &lin->bias_dtype});
}

void WeightList::Vector(std::vector<float>* v, const std::string& name, int64_t n) {
  slots.push_back({name, {n}, true, nullptr, v});
}

std::vector<WeightSlot> EnumerateWeights(const ModelConfig& c, ModelWeights* w) {
  const int64_t d = c.model_dim;
  const int64_t q_dim = int64_t{c.num_heads} * c.head_dim;
  const int64_t kv_dim = int64_t{c.num_kv_heads} * c.head_dim;
  WeightList list;
  std::vector<WeightSlot>& slots = list.slots;
  auto matrix = [&](Linear* lin, const std::string& name, int64_t out, int64_t in, bool bias) {
    list.Matrix(lin, name, out, in, bias);
  };
  auto vec = [&](std::vector<float>* v, const std::string& name, int64_t n) { list.Vector(v, name, n); };
  slots.push_back({"model.embed_tokens.weight", {c.vocab_size, d}, true, &w->embed, nullptr});
  w->layers.assign(static_cast<size_t>(c.num_layers), LayerWeights{});
  for (int i = 0; i < c.num_layers; ++i) {
    LayerWeights& l = w->layers[static_cast<size_t>(i)];
    const std::string p = "model.layers." + std::to_string(i) + ".";
    list.layer = i;
    vec(&l.input_norm, p + "input_layernorm.weight", d);
    if (c.fused_qkv) {
      matrix(&l.qkv_proj, p + "self_attn.qkv_proj", q_dim + 2 * kv_dim, d, c.qkv_bias);
    } else {
      matrix(&l.q_proj, p + "self_attn.q_proj", q_dim, d, c.qkv_bias);
      matrix(&l.k_proj, p + "self_attn.k_proj", kv_dim, d, c.qkv_bias);
      matrix(&l.v_proj, p + "self_attn.v_proj", kv_dim, d, c.qkv_bias);
    }
    matrix(&l.o_proj, p + "self_attn.o_proj", d, q_dim, c.o_bias);
    if (c.qk_norm) {
      vec(&l.q_norm, p + "self_attn.q_norm.weight", c.head_dim);
      vec(&l.k_norm, p + "self_attn.k_norm.weight", c.head_dim);
    }
    if (c.sandwich_norm) {  // Gemma: post_attention_layernorm is on the attention output
      vec(&l.attn_out_norm, p + "post_attention_layernorm.weight", d);
      vec(&l.post_norm, p + "pre_feedforward_layernorm.weight", d);
      vec(&l.ffn_out_norm, p + "post_feedforward_layernorm.weight", d);
    } else {
      vec(&l.post_norm, p + "post_attention_layernorm.weight", d);
    }
    if (c.layers[static_cast<size_t>(i)].moe) {  // router + experts replace the MLP
      const MoeConfig& moe = c.moe;
      const std::string m = p + moe.block + ".";
      matrix(&l.moe.router, m + "gate", moe.num_experts, d, false);
      l.moe.experts.resize(static_cast<size_t>(moe.num_experts));
      for (int e = 0; e < moe.num_experts; ++e) {
        ExpertWeights& x = l.moe.experts[static_cast<size_t>(e)];
        const std::string xp = m + "experts." + std::to_string(e) + ".";
        matrix(&x.gate, xp + moe.gate, moe.expert_ffn_dim, d, false);
        matrix(&x.up, xp + moe.up, moe.expert_ffn_dim, d, false);
        matrix(&x.down, xp + moe.down, d, moe.expert_ffn_dim, false);
      }
      continue;
    }
    if (c.fused_gate_up) {
      matrix(&l.gate_up_proj, p + "mlp.gate_up_proj", 2 * int64_t{c.ffn_dim}, d, c.mlp_bias);
    } else {
      matrix(&l.gate_proj, p + "mlp.gate_proj", c.ffn_dim, d, c.mlp_bias);
      matrix(&l.up_proj, p + "mlp.up_proj", c.ffn_dim, d, c.mlp_bias);
    }
    matrix(&l.down_proj, p + "mlp.down_proj", d, c.ffn_dim, c.mlp_bias);
  }
  list.layer = -1;
  vec(&w->final_norm, "model.norm.weight", d);
  w->lm_head.name = "lm_head";
  // Tied: transformers uses the embedding and ignores a stored lm_head.weight.
  slots.push_back({"lm_head.weight", {c.vocab_size, d}, !c.tie_word_embeddings,
                   &w->lm_head.weight, nullptr, &w->lm_head});
  return slots;
}

namespace {
// What a compressed-tensors config may not ask of this model: targets naming nothing loom
// quantizes, a quantized head tied to the embedding. (Experts are read per expert, as
// llm-compressor writes them: `…experts.<e>.gate_proj.weight_packed`.)
Status CheckCtModel(const ModelConfig& config, const std::vector<WeightSlot>& slots, const CtConfig& quant) {
  std::vector<std::string> names;
  for (const WeightSlot& slot : slots) {
    if (slot.linear) names.push_back(slot.linear->name);
  }
  RETURN_IF_ERROR(quant.CheckTargets(names));
  if (config.tie_word_embeddings && quant.Find("lm_head")) {
    return InvalidArgument(quant.where() + ": quantization_config quantizes lm_head, which is tied "
                           "to the embedding; add \"lm_head\" to ignore");
  }
  return OkStatus();
}

// Row reader of a pre-quantized projection: scale · q, as the int8 / int4 kernels compute.
std::function<void(int64_t, float*)> DequantizedRows(const Linear& lin) {
  if (lin.int8) {
    return [w = lin.int8](int64_t j, float* row) {
      for (int64_t i = 0; i < w->cols; ++i) row[i] = w->Dequantized(j, i);
    };
  }
  if (lin.int4) {
    return [w = lin.int4](int64_t j, float* row) {
      for (int64_t i = 0; i < w->cols; ++i) row[i] = w->Dequantized(j, i);
    };
  }
  if (lin.nf4) {  // code · absmax in f32: bitsandbytes' dequantize_4bit (merges; the DoRA norm of
                  // a bf16/f16 quant_state uses dora_norm_row)
    return [w = lin.nf4](int64_t j, float* row) {
      for (int64_t i = 0; i < w->cols; ++i) row[i] = w->Dequantized(j, i);
    };
  }
  return {};
}

}  // namespace

void SetQuantizedSiteRows(const Linear& lin, SiteTable* sites) {
  std::function<void(int64_t, float*)> norm_row;
  if (const auto& nf4 = lin.nf4; nf4 && nf4->dequant_dtype != DType::kF32) {
    // PEFT's DoRA norm dequantizes in quant_state's dtype (dequantize_bnb_weight).
    norm_row = [w = nf4](int64_t j, float* row) {
      for (int64_t i = 0; i < w->cols; ++i) row[i] = w->DequantizedAsStored(j, i);
    };
  }
  sites->SetQuantized(lin.site, lin.weight, DequantizedRows(lin), std::move(norm_row));
}

std::map<std::string, const Linear*> ProjectionsByName(const ModelWeights& w) {
  std::map<std::string, const Linear*> out;
  auto add = [&](const Linear& lin) {
    if (!lin.name.empty()) out[lin.name] = &lin;
  };
  for (const LayerWeights& l : w.layers) {
    for (const Linear* lin : {&l.q_proj, &l.k_proj, &l.v_proj, &l.o_proj, &l.gate_proj, &l.up_proj,
                              &l.down_proj, &l.qkv_proj, &l.gate_up_proj, &l.moe.router}) {
      add(*lin);
    }
    for (const ExpertWeights& x : l.moe.experts) {
      for (const Linear* lin : {&x.gate, &x.up, &x.down}) add(*lin);
    }
  }
  add(w.lm_head);
  return out;
}

bool IsMoeRouter(const ModelWeights& w, const Linear* lin) {
  for (const LayerWeights& l : w.layers) {
    if (lin == &l.moe.router && !l.moe.experts.empty()) return true;
  }
  return false;
}

namespace {
// The experts of `w` that `lin` belongs to, or null.
// One address-range test per layer (a Qwen3-235B has 36k expert projections: a scan of every
// expert per projection would be quadratic).
const std::vector<ExpertWeights>* ExpertsOf(const ModelWeights& w, const Linear* lin) {
  const std::less<const void*> before;
  for (const LayerWeights& l : w.layers) {
    const std::vector<ExpertWeights>& x = l.moe.experts;
    if (x.empty() || before(lin, x.data()) || !before(lin, x.data() + x.size())) continue;
    return &x;  // inside this layer's ExpertWeights array: one of its gate/up/down Linears
  }
  return nullptr;
}
}  // namespace

bool IsMoeExpert(const ModelWeights& w, const Linear* lin) { return ExpertsOf(w, lin) != nullptr; }

int Int4GroupOf(const ModelWeights& w, const Linear* lin, int requested) {
  if (const std::vector<ExpertWeights>* experts = ExpertsOf(w, lin)) {
    const ExpertWeights& x = experts->front();
    return Int4GroupFor(std::gcd(x.gate.in_features(), x.down.in_features()), requested);
  }
  return Int4GroupFor(lin->in_features(), requested);
}

namespace {
// Buffers some checkpoints carry that transformers recomputes and never loads.
bool IsIgnoredBuffer(const std::string& name) { return name.ends_with(".rotary_emb.inv_freq"); }

// The modules PEFT would see besides the projections and the embedding: each non-projection
// weight's module (the norms) and every module above a weight (model, model.layers,
// model.layers.3, ….self_attn, ….mlp). Not the experts' modules, whose layout transformers 5
// changed (fused parameters), nor anything inside them.
void AddOtherModules(const std::vector<WeightSlot>& slots, SiteTable* sites) {
  std::set<std::string> modules;
  for (const WeightSlot& slot : slots) {
    const size_t last = slot.name.rfind('.');
    if (last == std::string::npos) continue;
    const std::string module = slot.name.substr(0, last);
    if (slot.linear == nullptr) modules.insert(module);
    for (size_t dot = module.find('.'); dot != std::string::npos; dot = module.find('.', dot + 1)) {
      modules.insert(module.substr(0, dot));
    }
  }
  for (const std::string& m : modules) {
    if (sites->Find(m) >= 0 || m == sites->embedding_path()) continue;
    const bool expert = std::any_of(sites->expert_params().begin(), sites->expert_params().end(),
                                    [&](const ExpertParamSite& p) {
                                      const std::string owner = p.path.substr(0, p.path.rfind('.'));
                                      return m == owner || m.starts_with(owner + ".");
                                    });
    if (!expert) sites->AddOtherModule(m);
  }
}
}  // namespace

Status LoadWeights(const ModelConfig& config, const SafetensorsStore& store, ModelWeights* w,
                   SiteTable* sites, std::vector<Linear*>* site_linears, const CtConfig* quant,
                   uint64_t* quantized_bytes, const GptqConfig* gptq, const BnbConfig* bnb) {
  std::vector<WeightSlot> slots = EnumerateWeights(config, w);
  std::set<std::string> consumed;
  if (quant) RETURN_IF_ERROR(CheckCtModel(config, slots, *quant));
  if (gptq) RETURN_IF_ERROR(CheckGptqModel(config, store, *gptq));
  for (const WeightSlot& slot : slots) {
    if (gptq && slot.linear && slot.required && IsGptqLinear(store, slot.linear->name)) {
      RETURN_IF_ERROR(LoadGptqLinear(store, *gptq, slot.shape[0], slot.shape[1], slot.linear,
                                     &consumed, quantized_bytes));
      continue;
    }
    if (bnb && slot.linear && slot.required && HasBnbQuantState(store, slot.linear->name)) {
      RETURN_IF_ERROR(LoadBnbLinear(store, *bnb, slot.shape[0], slot.shape[1], slot.linear,
                                    &consumed, quantized_bytes));
      continue;
    }
    const CtScheme* scheme = quant && slot.linear && slot.required ? quant->Find(slot.linear->name) : nullptr;
    if (scheme) {  // pre-quantized projection: its compressed tensors instead of .weight
      RETURN_IF_ERROR(LoadCtLinear(store, *scheme, slot.shape[0], slot.shape[1], slot.linear,
                                   &consumed, quantized_bytes));
      continue;
    }
    const TensorInfo* info = store.Find(slot.name);
    if (!info) {
      if (slot.required) {
        return InvalidArgument("checkpoint " + store.source() + ": missing tensor '" + slot.name +
                               "' with shape " + ShapeString(slot.shape) + " required by " +
                               config.architecture);
      }
      continue;
    }
    consumed.insert(slot.name);
    if (!slot.required) continue;  // present but unused (tied lm_head)
    ASSIGN_OR_RETURN(Tensor t, store.Get(slot.name));
    if (t.shape != slot.shape) {
      return InvalidArgument(info->file + ": tensor '" + slot.name + "' has shape " +
                             ShapeString(t.shape) + ", the config needs " +
                             ShapeString(slot.shape));
    }
    if (slot.tensor) *slot.tensor = t;
    if (slot.f32) {
      slot.f32->resize(static_cast<size_t>(t.numel()));
      ToF32(t, slot.f32->data());
      if (slot.f32_source_dtype) *slot.f32_source_dtype = t.dtype;
    }
  }
  if (config.tie_word_embeddings) w->lm_head.weight = w->embed;
  // Every projection is an adapter site, in enumeration order.
  *sites = SiteTable();
  site_linears->clear();
  sites->SetArchitecture(config.architecture);
  sites->SetEmbedding("model.embed_tokens", w->embed);
  if (config.tie_word_embeddings) sites->SetTiedHead("lm_head");
  for (const WeightSlot& slot : slots) {
    if (!slot.linear) continue;
    LinearSite site{slot.linear->name, slot.linear->weight, slot.layer,
                    /*all_linear=*/slot.linear != &w->lm_head, /*dequantized_row=*/{},
                    /*dora_norm_row=*/{}};
    slot.linear->site = sites->Add(std::move(site));
    if (slot.linear->weight.data == nullptr) SetQuantizedSiteRows(*slot.linear, sites);
    site_linears->push_back(slot.linear);
  }
  for (int i = 0; i < config.num_layers; ++i) {  // transformers 5's fused expert parameters
    const LayerWeights& l = w->layers[static_cast<size_t>(i)];
    if (!l.moe.experts.empty()) AddMoeSites(l.moe, config.moe, "model.layers." + std::to_string(i) + ".", sites);
  }
  if (!sites->expert_params().empty()) MarkPeftMoeAllLinear(config.moe, sites);
  AddOtherModules(slots, sites);
  std::vector<std::string> leftovers;
  for (const std::string& name : store.names()) {
    if (!consumed.count(name) && !IsIgnoredBuffer(name)) leftovers.push_back(name);
  }
  if (!leftovers.empty()) {
    std::string list;
    for (size_t i = 0; i < leftovers.size() && i < 5; ++i) list += (i ? ", " : "") + leftovers[i];
    if (leftovers.size() > 5) list += ", … (" + std::to_string(leftovers.size()) + " in all)";
    const TensorInfo* first = store.Find(leftovers.front());
    return InvalidArgument(first->file + ": tensors not used by " + config.architecture + ": " +
                           list);
  }
  return OkStatus();
}

}  // namespace loom
