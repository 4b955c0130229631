// `loom quantize`: loom's int8/int4 weights (quantized as --quantize does) written as a compressed-tensors checkpoint, atomically.
#include "model/ct_checkpoint.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "base/file.h"
#include "base/json.h"
#include "cpu/int4_cpu.h"
#include "model/merged_checkpoint.h"

namespace loom {

namespace {

namespace fs = std::filesystem;

// compressed-tensors' version written into quantization_config (the one the fixtures and the
// reference check used).
constexpr const char* kCtVersion = "0.20.1";

// `other_groups`: int4 projections whose group is not o.group (Int4GroupOf), by group size;
// each is a config group of its own whose targets name them (exact names outrank the class
// "Linear" in compressed-tensors' matching; the experts as one "re:" pattern naming "experts",
// which is how transformers finds the experts' scheme). `dense`: what "Linear" would match that
// stays dense (routers; projections no group of 32 divides), listed in `ignore`.
nlohmann::ordered_json QuantizationConfig(const QuantizeCheckpointOptions& o,
                                          const std::vector<std::pair<int, std::vector<std::string>>>& other_groups,
                                          const std::vector<std::string>& dense) {
  using oj = nlohmann::ordered_json;
  const bool int4 = o.scheme == LoadOptions::Quantization::kInt4;
  const char* format = int4 ? "pack-quantized" : "int-quantized";
  auto scheme = [&](int group_size, oj targets) {
    oj weights = {{"dynamic", false},
                  {"group_size", int4 ? oj(group_size) : oj()},
                  {"num_bits", int4 ? 4 : 8},
                  {"strategy", int4 ? "group" : "channel"},
                  {"symmetric", true},
                  {"type", "int"}};
    oj inputs;  // W4A16: none in the file (loom's kernel still rounds activations to int8: W4A8)
    if (!int4) {
      inputs = {{"dynamic", true}, {"group_size", nullptr}, {"num_bits", 8},
                {"strategy", "token"}, {"symmetric", true}, {"type", "int"}};
    }
    return oj{{"format", format},
              {"input_activations", inputs},
              {"output_activations", nullptr},
              {"targets", std::move(targets)},
              {"weights", weights}};
  };
  oj groups = {{"group_0", scheme(o.group, oj::array({"Linear"}))}};
  for (const auto& [size, names] : other_groups) {
    groups["group_" + std::to_string(groups.size())] = scheme(size, oj(names));
  }
  oj ignore = o.quantize_head ? oj::array() : oj::array({"lm_head"});
  for (const std::string& name : dense) ignore.push_back(name);
  return {{"config_groups", groups},
          {"format", format},
          {"global_compression_ratio", nullptr},
          {"ignore", ignore},
          {"kv_cache_scheme", nullptr},
          {"moe_sparsity_config", nullptr},
          {"quant_method", "compressed-tensors"},
          {"quantization_status", "compressed"},
          {"sparsity_config", oj::object()},
          {"transform_config", oj::object()},
          {"version", kCtVersion}};
}

// The compressed tensors of one quantized projection.
void AddCompressedSpecs(const Linear& lin, std::vector<TensorSpec>* specs) {
  const int64_t out = lin.out_features(), in = lin.in_features();
  if (lin.int8) {
    specs->push_back({lin.name + ".weight", DType::kF32, {out, in}, "I8"});
    specs->push_back({lin.name + ".weight_scale", DType::kF32, {out, 1}});
  } else {
    const int group = lin.int4->group;
    specs->push_back({lin.name + ".weight_packed", DType::kF32, {out, in / 8}, "I32"});
    specs->push_back({lin.name + ".weight_scale", DType::kF16, {out, in / group}});
    specs->push_back({lin.name + ".weight_shape", DType::kF32, {2}, "I64"});
  }
}

// Fills one compressed tensor (`suffix` after the projection's name) from loom's weights.
void FillCompressed(const Linear& lin, const std::string& suffix, void* dst) {
  const int64_t out = lin.out_features(), in = lin.in_features();
  if (const Int8Weight* w = lin.int8.get()) {
    if (suffix == ".weight") {
      auto* q = static_cast<int8_t*>(dst);  // [out, in]
      for (int64_t j = 0; j < out; ++j) {
        for (int64_t i = 0; i < in; ++i) q[j * in + i] = w->At(j, i);
      }
    } else {  // .weight_scale [out, 1] f32: loom's scales, exact
      std::memcpy(dst, w->scale.data(), static_cast<size_t>(out) * sizeof(float));
    }
    return;
  }
  const Int4Weight& w = *lin.int4;
  const int64_t groups_pad = w.k_pad / w.group, file_groups = in / w.group;
  constexpr int64_t kPanel = cpu::kInt4Panel;
  if (suffix == ".weight_packed") {
    // compressed-tensors' pack_to_int32: element 8k + e in bits 4e..4e+3 of word k, as q + 8.
    auto* words = static_cast<uint32_t*>(dst);  // [out, in / 8]
    for (int64_t j = 0; j < out; ++j) {
      const uint8_t* panel = w.q.data() + (j / kPanel) * kPanel * (w.k_pad / 2);
      for (int64_t k = 0; k < in / 8; ++k) {
        uint32_t word = 0;
        for (int e = 0; e < 8; ++e) {
          const int8_t q = cpu::UnpackInt4(panel, j % kPanel, 8 * k + e);
          word |= static_cast<uint32_t>((q + 8) & 15) << (4 * e);
        }
        words[j * (in / 8) + k] = word;
      }
    }
  } else if (suffix == ".weight_scale") {
    // loom's f16 scales as they are. loom's rule d = m / −8 keeps the sign of the group's
    // largest-magnitude value m, so a scale may be negative (m is then q = −8 exactly); a
    // positive scale could not hold such a group (it would need q = +8).
    auto* d = static_cast<uint16_t*>(dst);  // [out, in / group]
    for (int64_t j = 0; j < out; ++j) {
      for (int64_t g = 0; g < file_groups; ++g) {
        d[j * file_groups + g] =
            w.scale[static_cast<size_t>(((j / kPanel) * groups_pad + g) * kPanel + j % kPanel)];
      }
    }
  } else {  // .weight_shape
    const int64_t shape[2] = {out, in};
    std::memcpy(dst, shape, sizeof(shape));
  }
}

}  // namespace

Status CheckQuantizeInput(const std::string& model_dir, const QuantizeCheckpointOptions& options) {
  switch (options.scheme) {
    case LoadOptions::Quantization::kNone:
      return InvalidArgument("--scheme: loom quantize writes int8 or int4, not none");
    case LoadOptions::Quantization::kNf4:
    case LoadOptions::Quantization::kFp4:
      return InvalidArgument("--scheme: loom quantize writes compressed-tensors int8 or int4; "
                             "bitsandbytes nf4/fp4 is quantized at load (--quantize nf4|fp4)");
    case LoadOptions::Quantization::kInt8:
      break;
    case LoadOptions::Quantization::kInt4:
      if (options.group != 32 && options.group != 128) {
        return InvalidArgument("--group-size " + std::to_string(options.group) +
                               ": int4 groups are 32 or 128 inputs");
      }
      break;
  }
  const std::string path = model_dir + "/config.json";
  ASSIGN_OR_RETURN(std::string text, ReadFileBounded(path, kMaxConfigFileBytes));
  // Read as the writer reads it at the end (ordered, its limits), so a config.json it would
  // refuse is refused now, not after the whole load and quantization.
  ASSIGN_OR_RETURN(nlohmann::ordered_json j, ParseOrderedJson(text, path));
  if (j.is_object() && j.contains("quantization_config") && !j["quantization_config"].is_null()) {
    const nlohmann::ordered_json& qc = j["quantization_config"];
    const std::string method = qc.is_object() && qc.contains("quant_method") && qc["quant_method"].is_string()
                                   ? qc["quant_method"].get<std::string>()
                                   : "unknown";
    return FailedPrecondition(path + " has a quantization_config (quant_method '" + method +
                              "'): the checkpoint is quantized already; loom quantize takes an "
                              "F32/F16/BF16 checkpoint");
  }
  return LoadModelConfig(model_dir).status();
}

Status WriteQuantizedCheckpoint(const std::string& model_dir,
                                const QuantizeCheckpointOptions& options,
                                const std::string& out_dir, bool check_weights,
                                std::string* departures) {
  if (departures != nullptr) departures->clear();
  RETURN_IF_ERROR(CheckQuantizeInput(model_dir, options));
  // Before the load: a bad --out fails at once (and again before writing, below).
  RETURN_IF_ERROR(CheckMergeOutput(model_dir, "", out_dir, "loom quantize").status());
  LoadOptions load;
  load.check_weights = check_weights;
  load.quantize = options.scheme;
  load.quantize_group = options.group;
  load.quantize_head = options.quantize_head;
  load.quantize_flag = "--scheme";
  load.quantize_group_flag = "--group-size";
  ASSIGN_OR_RETURN(std::unique_ptr<Model> model, Model::Load(model_dir, load));
  if (departures != nullptr) *departures = model->quantize_departures();
  const ModelConfig& c = model->config();
  const SafetensorsStore& store = model->store();
  const std::map<std::string, const Linear*> projections = ProjectionsByName(model->weights());
  std::map<std::string, const Linear*> quantized;  // "<module>.weight" → its quantized projection
  std::map<int, std::vector<std::string>> by_group;  // int4 group ≠ --group-size → modules
  std::vector<std::string> dense;  // not quantized though "Linear" matches them (ignore)
  const ModelWeights& w = model->weights();
  int expert_group = 0;  // the experts' one int4 group (Int4GroupOf); 0 dense (or int8)
  std::string expert_scheme;  // the first expert's, which every other expert must share; empty: no experts
  for (const auto& [name, lin] : projections) {
    if (IsMoeExpert(w, lin)) {  // one "re:" pattern for all of them, below
      const std::string scheme = lin->int8 ? "int8" : lin->int4 ? "int4 g" + std::to_string(lin->int4->group) : "dense";
      if (expert_scheme.empty()) expert_scheme = scheme;
      if (scheme != expert_scheme) {  // Model::Quantize gives a whole model's experts one scheme
        return Internal(name + " is " + scheme + " but another expert is " + expert_scheme +
                        "; compressed-tensors readers take one scheme for all experts");
      }
      expert_group = lin->int4 ? lin->int4->group : 0;
      if (lin->int8 || lin->int4) quantized[name + ".weight"] = lin;
      continue;
    }
    if (!lin->int8 && !lin->int4) {
      // lm_head without --quantize-head is "lm_head" in ignore already; with it, a head left
      // dense (no int4 group of 32 divides its inputs) must be listed, or "Linear" claims it.
      if (lin != &w.lm_head || options.quantize_head) dense.push_back(name);
      continue;
    }
    if (lin->int4 && lin->in_features() % lin->int4->group != 0) {  // Model::Quantize never does
      return Internal(name + ": int4 group " + std::to_string(lin->int4->group) + " does not divide " +
                      std::to_string(lin->in_features()) + " input features");
    }
    if (lin->int4 && lin->int4->group != options.group) by_group[lin->int4->group].push_back(name);
    quantized[name + ".weight"] = lin;
  }
  std::vector<std::pair<int, std::vector<std::string>>> other_groups(by_group.begin(), by_group.end());
  if (!expert_scheme.empty()) {
    // The model's own names, and vLLM's (its fused-MoE layer looks the scheme up under
    // "<layer>.experts.0.gate_proj" whatever the checkpoint calls them).
    std::string names = c.moe.gate + "|" + c.moe.up + "|" + c.moe.down;
    if (c.moe.gate != "gate_proj") names += "|gate_proj|up_proj|down_proj";
    const std::string pattern = "re:.*\\.experts\\.\\d+\\.(" + names + ")$";
    const bool int4 = options.scheme == LoadOptions::Quantization::kInt4;
    if (int4 && expert_group == 0) {
      dense.push_back(pattern);
    } else if (int4 && expert_group != options.group) {
      other_groups.push_back({expert_group, {pattern}});
    }
  }
  // A tied model with its head quantized: lm_head gets tensors of its own (compressed-tensors
  // cannot quantize a head tied to the embedding), and config.json says untied.
  const Linear& head = model->weights().lm_head;
  const bool untie = c.tie_word_embeddings && (head.int8 || head.int4);
  std::vector<TensorSpec> specs;
  std::map<std::string, const Linear*> compressed_of;  // compressed tensor name → projection
  for (const std::string& name : store.names()) {
    const TensorInfo* info = store.Find(name);
    if (untie && name == "lm_head.weight") continue;  // unused when tied; written below
    if (auto it = quantized.find(name); it != quantized.end()) {
      const size_t first = specs.size();
      AddCompressedSpecs(*it->second, &specs);
      for (size_t i = first; i < specs.size(); ++i) compressed_of[specs[i].name] = it->second;
      continue;
    }
    if (!info->dtype) {
      return InvalidArgument(info->file + ": tensor '" + name + "' has dtype " + info->dtype_name +
                             ", which loom quantize does not copy (F32/F16/BF16 checkpoints only)");
    }
    specs.push_back({name, *info->dtype, info->shape});
  }
  if (untie) {
    const size_t first = specs.size();
    AddCompressedSpecs(head, &specs);
    for (size_t i = first; i < specs.size(); ++i) compressed_of[specs[i].name] = &head;
  }
  for (const auto& [name, lin] : quantized) {  // every quantized projection was in the files
    if (!compressed_of.count(lin->name + (lin->int8 ? ".weight" : ".weight_packed"))) {
      return Internal("loom quantize: projection " + lin->name + " has no tensor in " + model_dir);
    }
  }
  auto fill = [&](const TensorSpec& spec, void* dst) -> Status {
    if (auto it = compressed_of.find(spec.name); it != compressed_of.end()) {
      FillCompressed(*it->second, spec.name.substr(it->second->name.size()), dst);
      return OkStatus();
    }
    const TensorInfo* info = store.Find(spec.name);
    std::memcpy(dst, info->data, info->nbytes);
    return OkStatus();
  };
  ASSIGN_OR_RETURN(std::string cfg_text, ReadFileBounded(model_dir + "/config.json", kMaxConfigFileBytes));
  ASSIGN_OR_RETURN(nlohmann::ordered_json cfg, ParseOrderedJson(cfg_text, model_dir + "/config.json"));
  if (!cfg.is_object()) return InvalidArgument(model_dir + "/config.json: not a JSON object");
  if (untie) cfg["tie_word_embeddings"] = false;
  cfg["quantization_config"] = QuantizationConfig(options, other_groups, dense);
  // Checked again after the load (minutes on a large model), as `loom merge` does: a folder
  // above --out may have been swapped for a link into the model folder meanwhile.
  ASSIGN_OR_RETURN(const std::string out_now,
                   CheckMergeOutput(model_dir, "", out_dir, "loom quantize"));
  return WriteCheckpointAtomically(out_dir, out_now, "loom quantize", [&](const std::string& tmp) {
    // Side files first: one that cannot be copied fails before the shards are written.
    RETURN_IF_ERROR(CopyCheckpointSideFiles(model_dir, tmp));
    RETURN_IF_ERROR(WriteCheckpointShards(tmp, specs, fill, options.max_shard_bytes));
    // config.json with the quantization_config (replacing the copy; inside loom's own folder).
    const std::string path = tmp + "/config.json";
    ASSIGN_OR_RETURN(const std::string text, JsonForFile(cfg, 2, path));
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << text << "\n";
    out.close();
    return out ? OkStatus() : Internal(path + ": write failed (disk full?)");
  });
}

}  // namespace loom
