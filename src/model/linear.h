// Linear: y = x·Wᵀ (+ b) for one projection — the single place every projection runs through.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/batch.h"
#include "ops/matmul.h"
#include "ops/matmul_int4.h"
#include "ops/matmul_int8.h"
#include "ops/matmul_nf4.h"
#include "tensor/tensor.h"

namespace loom {

class Adapter;
struct LoraWeights;

// The adapters a forward pass applies: rows of `segments` use adapters[adapter_slot]
// (slot -1 = base model). Null or empty segments = every row runs the base model.
struct LoraBatch {
  const std::vector<Segment>* segments = nullptr;
  const std::vector<const Adapter*>* adapters = nullptr;
};

// Thread-safety: immutable after load; Forward may run from the engine thread only (uses the
// global pool).
struct Linear {
  std::string name;         // HF module path, e.g. "model.layers.3.self_attn.q_proj"
  Tensor weight;            // [out_features, in_features], file dtype, mmap'd
  std::vector<float> bias;  // [out_features] f32, or empty
  DType bias_dtype = DType::kF32;  // the checkpoint's dtype of `bias` (a merged bias rounds to it)
  int site = -1;            // index in the model's SiteTable, for adapter lookup (-1: none)
  // Set by --quantize int8 / int4: the base matmul runs on these instead of `weight` (which
  // stays mapped: merges and DoRA norms read it). At most one is set. Pre-quantized checkpoints
  // (compressed-tensors, GPTQ/AWQ, bitsandbytes LLM.int8) set them too, `weight` shape-only.
  std::shared_ptr<const Int8Weight> int8;
  std::shared_ptr<const Int4Weight> int4;
  // A bitsandbytes 4-bit (NF4/FP4) checkpoint's projection (model/bnb.h); `weight` is then
  // shape-only.
  std::shared_ptr<const Nf4Weight> nf4;
  // Model::PackWeightsForAmx's copy of a bf16 `weight` in AMX tiles (serving with batch
  // invariance on an AMX CPU, where every matmul of it runs on AMX); `weight` stays mapped for
  // the other paths, merges and DoRA norms.
  std::shared_ptr<const AmxPackedWeight> amx;

  int64_t in_features() const { return weight.dim(1); }
  int64_t out_features() const { return weight.dim(0); }

  // x: [n, in_features] f32; y: [n, out_features] f32 (overwritten). Each segment whose
  // adapter adapts this projection adds its delta to its own rows: shrink t = x·Aᵀ
  // [rows, rank], expand y += scale·t·Bᵀ (DoRA: y = b + g⊙(x·Wᵀ) + g⊙scale·t·Bᵀ). A
  // projection no segment adapts costs nothing extra.
  void Forward(const float* x, int64_t n, float* y, const LoraBatch& lora = {}) const;
  // The weights of segment `seg`'s adapter for this projection (null: base rows, or an adapter
  // that does not adapt it); lora.adapters must be set.
  const LoraWeights* SegmentLora(const LoraBatch& lora, const Segment& seg) const;
  // Whether a segment of `lora` has an adapter with weights for this projection.
  bool Adapted(const LoraBatch& lora) const;
};

// y [n, out] = SiLU(gate(x)) ⊙ up(x) in one fused pass (MatmulSiluMul) where it gives the same
// bits as the two Forwards then SiluMulInPlace: both bf16 packed for AMX, no bias, no adapter
// of this batch on either. Returns false (nothing written) otherwise.
bool ForwardSiluMul(const Linear& gate, const Linear& up, const float* x, int64_t n, float* y,
                    const LoraBatch& lora);

// Several projections of the same x (q, k, v) in one pass (MatmulShared): each y as its
// Forward would give it, where all are bf16 packed for AMX and no adapter of this batch touches
// any. Returns false (nothing written) otherwise.
bool ForwardShared(const std::vector<std::pair<const Linear*, float*>>& parts, const float* x,
                   int64_t n, const LoraBatch& lora);

}  // namespace loom
