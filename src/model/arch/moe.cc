// Mixture-of-experts forward: router top-k, rows grouped by expert, per-expert gated MLPs.
#include "model/arch/moe.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "base/check.h"
#include "base/json.h"
#include "ops/basic_ops.h"
#include "tensor/tensor.h"

namespace loom {

namespace {

// Per-call buffers, owned by the calling (engine) thread like Linear's shrink scratch.
struct MoeScratch {
  AlignedBuffer<float> logits;  // [n, num_experts] router logits, then probabilities
  AlignedBuffer<float> x;       // [m, model_dim] the rows routed to one expert
  AlignedBuffer<float> gate;    // [m, expert_ffn_dim]
  AlignedBuffer<float> up;      // [m, expert_ffn_dim]
  AlignedBuffer<float> y;       // [m, model_dim]
  std::vector<int> choice;      // [n, top_k] expert ids, best first
  std::vector<float> weight;    // [n, top_k] their routing weights
  std::vector<int> rows;        // rows routed to the current expert, ascending
  std::vector<float> row_weight;
  std::vector<Segment> segments;  // the adapter segments re-expressed over `rows`
};

MoeScratch& Scratch() {
  static thread_local MoeScratch s;
  return s;
}

// Softmax over one row of router logits, then the top k (ties: lower expert id first, as
// torch.topk on CPU), then transformers' optional renormalisation.
void Route(float* p, int num_experts, int k, bool norm, int* choice, float* weight) {
  float max = p[0];
  for (int e = 1; e < num_experts; ++e) max = std::max(max, p[e]);
  float sum = 0;
  for (int e = 0; e < num_experts; ++e) {
    p[e] = std::exp(p[e] - max);
    sum += p[e];
  }
  for (int e = 0; e < num_experts; ++e) p[e] /= sum;
  for (int i = 0; i < k; ++i) {
    int best = -1;
    for (int e = 0; e < num_experts; ++e) {
      if (std::find(choice, choice + i, e) != choice + i) continue;
      if (best < 0 || p[e] > p[best]) best = e;
    }
    choice[i] = best;
    weight[i] = p[best];
  }
  if (norm) {
    float total = 0;
    for (int i = 0; i < k; ++i) total += weight[i];
    for (int i = 0; i < k; ++i) weight[i] /= total;
  }
}

// `segments` over the batch → the same adapters over the gathered `rows` (ascending).
void GatherSegments(const std::vector<Segment>& segments, const std::vector<int>& rows,
                    std::vector<Segment>* out) {
  out->clear();
  size_t seg = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    while (seg < segments.size() && rows[i] >= segments[seg].first_row + segments[seg].num_rows) {
      ++seg;
    }
    const int slot = seg < segments.size() && rows[i] >= segments[seg].first_row
                         ? segments[seg].adapter_slot
                         : -1;
    if (!out->empty() && out->back().adapter_slot == slot) {
      ++out->back().num_rows;
    } else {
      out->push_back({static_cast<int>(i), 1, slot});
    }
  }
}

}  // namespace

void GatedActivationInPlace(Activation act, float* gate, const float* up, int64_t count) {
  switch (act) {
    case Activation::kGeluTanh:
      GeluTanhMulInPlace(gate, up, count);
      return;
    case Activation::kGeluErf:
      GeluErfMulInPlace(gate, up, count);
      return;
    case Activation::kSilu:
      break;
  }
  SiluMulInPlace(gate, up, count);
}

int64_t MoeForward(const MoeWeights& w, const MoeConfig& c, Activation act, const float* h,
                   int64_t n, float* out, const LoraBatch& lora) {
  MoeScratch& s = Scratch();
  const int num_experts = c.num_experts;
  const int k = c.top_k;
  const int64_t d = w.router.in_features();
  const int64_t ffn = c.expert_ffn_dim;
  LOOM_CHECK_OK(s.logits.Resize(static_cast<size_t>(n * num_experts)));
  w.router.Forward(h, n, s.logits.data(), lora);  // [n, num_experts], f32
  s.choice.resize(static_cast<size_t>(n * k));
  s.weight.resize(static_cast<size_t>(n * k));
  for (int64_t r = 0; r < n; ++r) {
    Route(s.logits.data() + r * num_experts, num_experts, k, c.norm_topk, s.choice.data() + r * k,
          s.weight.data() + r * k);
  }
  std::fill(out, out + n * d, 0.0f);
  int64_t bytes_read = 0;
  for (int e = 0; e < num_experts; ++e) {
    s.rows.clear();
    s.row_weight.clear();
    for (int64_t r = 0; r < n; ++r) {
      for (int i = 0; i < k; ++i) {
        if (s.choice[static_cast<size_t>(r * k + i)] != e) continue;
        s.rows.push_back(static_cast<int>(r));
        s.row_weight.push_back(s.weight[static_cast<size_t>(r * k + i)]);
      }
    }
    if (s.rows.empty()) continue;  // an expert no row chose is never read
    const int64_t m = static_cast<int64_t>(s.rows.size());
    LOOM_CHECK_OK(s.x.Resize(static_cast<size_t>(m * d)));
    LOOM_CHECK_OK(s.gate.Resize(static_cast<size_t>(m * ffn)));
    LOOM_CHECK_OK(s.up.Resize(static_cast<size_t>(m * ffn)));
    LOOM_CHECK_OK(s.y.Resize(static_cast<size_t>(m * d)));
    for (int64_t i = 0; i < m; ++i) {
      const float* src = h + static_cast<int64_t>(s.rows[static_cast<size_t>(i)]) * d;
      std::copy(src, src + d, s.x.data() + i * d);
    }
    LoraBatch sub;
    if (lora.segments && lora.adapters) {
      GatherSegments(*lora.segments, s.rows, &s.segments);
      sub.segments = &s.segments;
      sub.adapters = lora.adapters;
    }
    const ExpertWeights& ex = w.experts[static_cast<size_t>(e)];
    bytes_read += static_cast<int64_t>(ex.gate.weight.nbytes() + ex.up.weight.nbytes() + ex.down.weight.nbytes());
    ex.gate.Forward(s.x.data(), m, s.gate.data(), sub);
    ex.up.Forward(s.x.data(), m, s.up.data(), sub);
    GatedActivationInPlace(act, s.gate.data(), s.up.data(), m * ffn);
    ex.down.Forward(s.gate.data(), m, s.y.data(), sub);
    for (int64_t i = 0; i < m; ++i) {
      float* dst = out + static_cast<int64_t>(s.rows[static_cast<size_t>(i)]) * d;
      const float* y = s.y.data() + i * d;
      const float wt = s.row_weight[static_cast<size_t>(i)];
      for (int64_t j = 0; j < d; ++j) dst[j] += y[j] * wt;
    }
  }
  return bytes_read;
}

void AddMoeSites(const MoeWeights& w, const MoeConfig& c, const std::string& prefix, SiteTable* sites) {
  ExpertParamSite gate_up{prefix + "mlp.experts.gate_up_proj", {}};
  ExpertParamSite down{prefix + "mlp.experts.down_proj", {}};
  for (const ExpertWeights& x : w.experts) {
    gate_up.parts.push_back({x.gate.site, x.up.site});
    down.parts.push_back({x.down.site});
  }
  sites->AddExpertParam(std::move(gate_up));
  sites->AddExpertParam(std::move(down));
  if (c.block != "mlp") sites->AddAlias(prefix + "mlp.gate", w.router.site);
}

void MarkPeftMoeAllLinear(const MoeConfig& c, SiteTable* sites) {
  for (int i = 0; i < sites->size(); ++i) {
    const std::string& path = sites->site(i).path;
    const std::string leaf = path.substr(path.rfind('.') + 1);
    if (leaf == "gate" || leaf == c.gate || leaf == c.up || leaf == c.down) sites->SetAllLinear(i, false);
  }
}

Status ParseMoeCommon(const nlohmann::json& j, const std::string& where, MoeConfig* moe) {
  // transformers maps num_experts ↔ num_local_experts (attribute_map); either may be written.
  const bool has_num_experts = j.contains("num_experts") && !j["num_experts"].is_null();
  RETURN_IF_ERROR(GetOptionalInt(j, has_num_experts ? "num_experts" : "num_local_experts", where,
                                 &moe->num_experts, 0, kMaxConfigExperts));
  if (moe->num_experts == 0) return OkStatus();
  // Every layer's experts get their projections enumerated before any tensor is looked at: the
  // product is bounded, or a config alone (1024 layers × 4096 experts) would allocate gigabytes.
  int layers = 0;
  RETURN_IF_ERROR(GetOptionalInt(j, "num_hidden_layers", where, &layers, 0, kMaxConfigLayers));
  if (static_cast<int64_t>(layers) * moe->num_experts > kMaxConfigExpertLayers) {
    return InvalidArgument(where + ": num_hidden_layers (" + std::to_string(layers) + ") × " +
                           (has_num_experts ? "num_experts" : "num_local_experts") + " (" +
                           std::to_string(moe->num_experts) + ") is above the maximum " +
                           std::to_string(kMaxConfigExpertLayers));
  }
  RETURN_IF_ERROR(GetInt(j, "num_experts_per_tok", where, &moe->top_k, 1, moe->num_experts));
  // Shared experts (Qwen2-MoE style) and grouped routing change the math; not implemented.
  for (const char* key : {"shared_expert_intermediate_size", "n_shared_experts", "n_group",
                          "topk_group", "moe_shared_expert_intermediate_size"}) {
    auto it = j.find(key);
    if (it != j.end() && !it->is_null() && !(it->is_number() && it->get<double>() == 0)) {
      return InvalidArgument(where + ": field '" + key + "' (shared experts / grouped routing) is "
                             "not supported");
    }
  }
  return OkStatus();
}

}  // namespace loom
