// Per-weight scheme and memory of a loaded model (projections as served, other tensors as stored).
#include "model/weight_memory.h"

#include "cpu/nf4_cpu.h"

#include <set>

namespace loom {

namespace {

// `prequantized`: Model::prequantized() ("" when loom quantized at load or not at all).
std::string ProjectionScheme(const Linear& lin, const std::string& prequantized) {
  const bool ct = prequantized == "compressed-tensors";
  if (lin.int8) {
    const std::string s = "int8 per-channel";
    if (prequantized.empty()) return s;
    return ct ? "compressed-tensors W8A8 (" + s + ")" : prequantized + " (" + s + ")";
  }
  if (lin.int4) {
    const std::string g = "int4 g" + std::to_string(lin.int4->group);
    if (prequantized.empty()) return g;
    return ct ? "compressed-tensors W4A16 (" + g + ")" : prequantized + " (" + g + ")";
  }
  if (lin.nf4) {
    return std::string("bitsandbytes ") + cpu::Bnb4TypeName(lin.nf4->type) + " (block " +
           std::to_string(lin.nf4->block) + ")";
  }
  return DTypeName(lin.weight.dtype);
}

// The projection a stored tensor belongs to: "<module>.<suffix…>" for a projection module and any
// suffix but "bias" ("q_proj.weight", "q_proj.qweight", "q_proj.weight.absmax",
// "q_proj.weight.quant_state.bitsandbytes__nf4"), else null.
const Linear* ProjectionOf(const std::map<std::string, const Linear*>& projections,
                           const std::string& name) {
  // The longest suffix is three parts ("weight.quant_state.bitsandbytes__nf4"): only the last
  // four dots are tried (every dot of a name made of dots was quadratic: inspect ran minutes).
  int tries = 0;
  for (size_t dot = name.rfind('.'); dot != std::string::npos && dot > 0 && tries < 4;
       dot = name.rfind('.', dot - 1), ++tries) {
    auto it = projections.find(name.substr(0, dot));
    if (it != projections.end()) return name.substr(dot + 1) == "bias" ? nullptr : it->second;
  }
  return nullptr;
}

}  // namespace

std::vector<WeightMemory> DescribeWeightMemory(const Model& model) {
  const ModelWeights& w = model.weights();
  const std::string& pre = model.prequantized();
  const std::map<std::string, const Linear*> projections = ProjectionsByName(w);  // module path → projection
  std::vector<WeightMemory> out;
  std::set<std::string> listed;
  auto add_projection = [&](const Linear& lin) {
    if (!listed.insert(lin.name).second) return;
    WeightMemory m{lin.name, ProjectionScheme(lin, pre), {lin.out_features(), lin.in_features()}, 0};
    if (lin.int8) {
      m.bytes = lin.int8->bytes();
    } else if (lin.int4) {
      m.bytes = lin.int4->bytes();
    } else if (lin.nf4) {
      m.bytes = lin.nf4->bytes();
    } else if (&lin == &w.lm_head && lin.weight.data == w.embed.data) {
      m.scheme = "tied to model.embed_tokens.weight";
    } else {
      m.bytes = lin.weight.nbytes();
    }
    out.push_back(std::move(m));
  };
  const SafetensorsStore& store = model.store();
  for (const std::string& name : store.names()) {
    // A projection's tensors: "<module>.weight", or its compressed forms.
    if (const Linear* lin = ProjectionOf(projections, name)) {
      add_projection(*lin);
      continue;
    }
    const TensorInfo* info = store.Find(name);
    out.push_back({name, info->dtype ? DTypeName(*info->dtype) : info->dtype_name, info->shape,
                   static_cast<uint64_t>(info->nbytes)});
  }
  if (!listed.count(w.lm_head.name) && !w.lm_head.name.empty()) add_projection(w.lm_head);  // tied
  return out;
}

std::map<std::string, std::pair<int64_t, uint64_t>> SumWeightMemory(const std::vector<WeightMemory>& w) {
  std::map<std::string, std::pair<int64_t, uint64_t>> sums;
  for (const WeightMemory& m : w) {
    auto& s = sums[m.scheme.starts_with("tied") ? "tied" : m.scheme];
    s.first += 1;
    s.second += m.bytes;
    sums["total"].first += 1;
    sums["total"].second += m.bytes;
  }
  return sums;
}

}  // namespace loom
