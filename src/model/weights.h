// The weight table of a Llama-family model and the one enumeration that loads and checks it.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "base/status.h"
#include "io/safetensors.h"
#include "lora/site_table.h"
#include "model/arch/moe.h"
#include "model/bnb.h"
#include "model/compressed_tensors.h"
#include "model/gptq.h"
#include "model/config.h"
#include "model/linear.h"

namespace loom {

struct LayerWeights {
  std::vector<float> input_norm;  // [model_dim]
  std::vector<float> post_norm;   // [model_dim] before the MLP (Gemma: pre_feedforward_layernorm)
  std::vector<float> attn_out_norm;  // [model_dim] on the attention output (Gemma), else empty
  std::vector<float> ffn_out_norm;   // [model_dim] on the MLP output (Gemma), else empty
  std::vector<float> q_norm;      // [head_dim] (Qwen3)
  std::vector<float> k_norm;      // [head_dim] (Qwen3)
  Linear q_proj;     // [num_heads*head_dim, model_dim]
  Linear k_proj;     // [num_kv_heads*head_dim, model_dim]
  Linear v_proj;     // [num_kv_heads*head_dim, model_dim]
  Linear o_proj;     // [model_dim, num_heads*head_dim]
  Linear gate_proj;  // [ffn_dim, model_dim]
  Linear up_proj;    // [ffn_dim, model_dim]
  Linear down_proj;  // [model_dim, ffn_dim]
  // Fused forms (config.fused_qkv / fused_gate_up) replace q/k/v and gate/up: one matmul each.
  Linear qkv_proj;      // [(num_heads + 2·num_kv_heads)·head_dim, model_dim]: q rows, k, v
  Linear gate_up_proj;  // [2·ffn_dim, model_dim]: gate rows then up rows
  MoeWeights moe;    // mixture-of-experts layers (LayerConfig::moe) instead of the three above
};

struct ModelWeights {
  Tensor embed;                  // [vocab_size, model_dim], file dtype
  std::vector<LayerWeights> layers;
  std::vector<float> final_norm;  // [model_dim]
  Linear lm_head;                 // [vocab_size, model_dim]; the embedding when tied
};

// Every named projection of `w` by module name: attention and MLP projections, mixture-of-experts
// routers and experts, lm_head. Used by `loom inspect` and `loom quantize`.
std::map<std::string, const Linear*> ProjectionsByName(const ModelWeights& w);

// Whether `lin` is a mixture-of-experts router (…mlp.gate, …block_sparse_moe.gate). Load-time
// quantization and `loom quantize` keep routers dense, as vLLM (its gate takes no quant_config)
// and llama.cpp (ffn_gate_inp stays F32) do: a router error moves rows to other experts.
bool IsMoeRouter(const ModelWeights& w, const Linear* lin);

// Whether `lin` is a mixture-of-experts expert projection (gate, up or down of any expert).
bool IsMoeExpert(const ModelWeights& w, const Linear* lin);

// The int4 group `--quantize int4` (and `loom quantize`) gives `lin` when groups of `requested`
// are asked for: Int4GroupFor(in, requested) (ops/matmul_int4.h), except that a layer's experts
// all take the one group that divides both their inputs (gate/up: model_dim, down: the expert
// width) — transformers and vLLM read one scheme for a whole expert block. 0: stays dense.
int Int4GroupOf(const ModelWeights& w, const Linear* lin, int requested);

// One weight the model expects: its HF name, shape, and where it goes (a matmul weight
// stays a view in its file dtype; norms and biases become f32).
struct WeightSlot {
  std::string name;
  std::vector<int64_t> shape;
  bool required = true;
  Tensor* tensor = nullptr;
  std::vector<float>* f32 = nullptr;
  Linear* linear = nullptr;  // the projection whose .weight this is: an adapter site
  int layer = -1;            // decoder layer of `linear`, or -1
  DType* f32_source_dtype = nullptr;  // with f32: set to the file's dtype of the tensor
};

// Collects the weight slots of a model as an architecture enumerates them.
struct WeightList {
  std::vector<WeightSlot> slots;
  int layer = -1;  // the decoder layer being enumerated (recorded with each projection)

  // A projection `name` ("model.layers.3.self_attn.q_proj"): its .weight [out, in] (and .bias
  // [out] when `bias`); it becomes an adapter site named `name`.
  void Matrix(Linear* lin, const std::string& name, int64_t out, int64_t in, bool bias);
  // An f32 vector (norm weights).
  void Vector(std::vector<float>* v, const std::string& name, int64_t n);
};

// Every weight of `config`, in checkpoint order, pointing into `w` (which it sizes).
std::vector<WeightSlot> EnumerateWeights(const ModelConfig& config, ModelWeights* w);

// Fills `w` from `store`: every required weight found with its exact shape, every tensor in
// the files consumed (buffers transformers ignores too, like rotary inv_freq, are skipped).
// Errors name the tensor and the file. `sites` gets every projection (Linear::site set) and
// `site_linears` the Linear of each site, by site index.
// `quant` (a compressed-tensors checkpoint's config, or null): the projections it quantizes are
// read from their compressed tensors instead (model/compressed_tensors.h), adding their bytes to
// `quantized_bytes`. `gptq` (a GPTQ/AWQ checkpoint's config, or null): the projections stored as
// qweight/qzeros/scales are read from those (model/gptq.h), the others as dense weights.
// `bnb` (a bitsandbytes checkpoint's config, or null): the projections with a quant_state (4-bit)
// or SCB (8-bit) are read as NF4/FP4 or LLM.int8 weights (model/bnb.h).
// The row readers of site `lin.site` for a projection served from quantized weights only
// (lin.weight shape-only): dequantized_row, and dora_norm_row where PEFT's DoRA norm differs
// (bitsandbytes 4-bit with a bf16/f16 quant_state). Also sets the site's weight to lin.weight.
void SetQuantizedSiteRows(const Linear& lin, SiteTable* sites);

Status LoadWeights(const ModelConfig& config, const SafetensorsStore& store, ModelWeights* w,
                   SiteTable* sites, std::vector<Linear*>* site_linears,
                   const CtConfig* quant = nullptr, uint64_t* quantized_bytes = nullptr,
                   const GptqConfig* gptq = nullptr, const BnbConfig* bnb = nullptr);

}  // namespace loom
