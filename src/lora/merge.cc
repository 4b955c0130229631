// Merge math and the merged-checkpoint writer.
#include "lora/merge.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "base/mmap_file.h"
#include "io/safetensors.h"
#include "model/model.h"

namespace loom {

namespace fs = std::filesystem;

void MergeLinearWeight(const Tensor& base, const LoraWeights& lw, void* out) {
  const int64_t rows = base.dim(0), in = base.dim(1);
  const int rank = lw.rank;
  std::vector<float> a(static_cast<size_t>(rank * in)), b(static_cast<size_t>(rows * rank));
  ConvertToF32(lw.a.dtype, lw.a.data, a.data(), rank * in);
  ConvertToF32(lw.b.dtype, lw.b.data, b.data(), rows * rank);
  std::vector<float> row(static_cast<size_t>(in)), delta(static_cast<size_t>(in));
  const size_t row_bytes = static_cast<size_t>(in) * DTypeSize(base.dtype);
  for (int64_t o = 0; o < rows; ++o) {
    ConvertToF32(base.dtype, static_cast<const uint8_t*>(base.data) + o * row_bytes, row.data(), in);
    // Same order as PEFT get_delta_weight: (B @ A) first, then × scaling, then W + ΔW, so
    // the f32 values (and hence their rounding to bf16) agree.
    std::fill(delta.begin(), delta.end(), 0.0f);
    for (int k = 0; k < rank; ++k) {
      const float bk = b[static_cast<size_t>(o * rank + k)];
      const float* ak = a.data() + static_cast<size_t>(k) * in;
      for (int64_t i = 0; i < in; ++i) delta[static_cast<size_t>(i)] += bk * ak[i];
    }
    for (int64_t i = 0; i < in; ++i) row[static_cast<size_t>(i)] += delta[static_cast<size_t>(i)] * lw.scale;
    if (!lw.dora_gain.empty()) {  // Same as PEFT DoRA merge: magnitude/‖W + ΔW‖ ⊙ (W + ΔW).
      const float g = lw.dora_gain[static_cast<size_t>(o)];
      for (float& v : row) v *= g;
    }
    ConvertFromF32(base.dtype, row.data(), static_cast<uint8_t*>(out) + o * row_bytes, in);
  }
}

void MergeEmbedding(const Tensor& base, const LoraEmbedding& e, void* out) {
  const int64_t vocab = base.dim(0), d = base.dim(1);
  std::vector<float> row(static_cast<size_t>(d));
  const size_t row_bytes = static_cast<size_t>(d) * DTypeSize(base.dtype);
  for (int64_t t = 0; t < vocab; ++t) {
    ConvertToF32(base.dtype, static_cast<const uint8_t*>(base.data) + t * row_bytes, row.data(), d);
    const float* at = e.a_t.data() + static_cast<size_t>(t) * e.rank;
    for (int64_t i = 0; i < d; ++i) {
      float acc = 0;
      for (int k = 0; k < e.rank; ++k) acc += e.b[static_cast<size_t>(i * e.rank + k)] * at[k];
      row[static_cast<size_t>(i)] += e.scale * acc;
    }
    ConvertFromF32(base.dtype, row.data(), static_cast<uint8_t*>(out) + t * row_bytes, d);
  }
}

}  // namespace loom

namespace loom {

Status WriteMergedCheckpoint(const std::string& model_dir, const Model& model,
                             const Adapter& adapter, const std::string& out_dir,
                             uint64_t max_shard_bytes) {
  const ModelConfig& c = model.config();
  const SafetensorsStore& store = model.store();
  std::map<std::string, const LoraWeights*> adapted;  // "...q_proj.weight" → LoRA
  for (const LoraWeights* lw : adapter.modules()) {
    if (!lw->bias.empty()) {
      const std::string bias_name = lw->module_path + ".bias";
      if (!store.Find(bias_name)) {
        return InvalidArgument("adapter '" + adapter.name() + "' has lora_bias on '" + lw->module_path +
                               "', whose base projection has no bias: a merged checkpoint could not "
                               "express it (serve it merged with --merge instead)");
      }
    }
    adapted[lw->module_path + ".weight"] = lw;
  }
  // Tied embeddings with an adapted head or embedding: the merged model has two tables.
  const bool untie = c.tie_word_embeddings && (adapter.embedding() || adapted.count("lm_head.weight"));
  std::vector<TensorSpec> specs;
  for (const std::string& name : store.names()) {
    const TensorInfo* info = store.Find(name);
    if (!info->dtype) {
      return InvalidArgument(info->file + ": tensor '" + name + "' has dtype " + info->dtype_name +
                             ", which the merged checkpoint writer does not copy");
    }
    if (untie && name == "lm_head.weight") continue;  // rewritten below
    specs.push_back({name, *info->dtype, info->shape});
  }
  if (untie) specs.push_back({"lm_head.weight", model.weights().embed.dtype, model.weights().embed.shape});

  auto fill = [&](const TensorSpec& spec, void* dst) -> Status {
    const bool head = spec.name == "lm_head.weight";
    const Tensor base = head && untie ? model.weights().embed : *store.Get(spec.name);
    if (auto it = adapted.find(spec.name); it != adapted.end()) {
      MergeLinearWeight(base, *it->second, dst);
    } else if (spec.name == "model.embed_tokens.weight" && adapter.embedding()) {
      MergeEmbedding(base, *adapter.embedding(), dst);
    } else {
      std::memcpy(dst, base.data, base.nbytes());
    }
    if (spec.name.size() > 5 && spec.name.compare(spec.name.size() - 5, 5, ".bias") == 0) {
      const std::string module = spec.name.substr(0, spec.name.size() - 5);
      for (const LoraWeights* lw : adapter.modules()) {
        if (lw->module_path != module || lw->bias.empty()) continue;
        std::vector<float> b(static_cast<size_t>(base.numel()));
        ConvertToF32(base.dtype, base.data, b.data(), base.numel());
        for (size_t j = 0; j < b.size(); ++j) b[j] += lw->scale * lw->bias[j];
        ConvertFromF32(base.dtype, b.data(), dst, base.numel());
      }
    }
    return OkStatus();
  };

  std::error_code ec;
  fs::create_directories(out_dir, ec);
  if (ec) return InvalidArgument(out_dir + ": cannot create: " + ec.message());
  // Shards of at most max_shard_bytes (a tensor larger than that gets a shard of its own).
  std::vector<std::vector<size_t>> shards(1);
  uint64_t in_shard = 0, total = 0;
  for (size_t i = 0; i < specs.size(); ++i) {
    uint64_t n = DTypeSize(specs[i].dtype);
    for (int64_t d : specs[i].shape) n *= static_cast<uint64_t>(d);
    if (!shards.back().empty() && in_shard + n > max_shard_bytes) {
      shards.emplace_back();
      in_shard = 0;
    }
    shards.back().push_back(i);
    in_shard += n;
    total += n;
  }
  nlohmann::json weight_map = nlohmann::json::object();
  const std::map<std::string, std::string> meta = {{"format", "pt"}};
  for (size_t s = 0; s < shards.size(); ++s) {
    char file[64];
    if (shards.size() == 1) {
      std::snprintf(file, sizeof(file), "model.safetensors");
    } else {
      std::snprintf(file, sizeof(file), "model-%05zu-of-%05zu.safetensors", s + 1, shards.size());
    }
    std::vector<TensorSpec> shard_specs;
    for (size_t i : shards[s]) {
      shard_specs.push_back(specs[i]);
      weight_map[specs[i].name] = file;
    }
    RETURN_IF_ERROR(WriteSafetensorsStreaming(
        (fs::path(out_dir) / file).string(), shard_specs,
        [&](size_t i, void* dst) { return fill(shard_specs[i], dst); }, meta));
  }
  if (shards.size() > 1) {
    nlohmann::json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
    std::ofstream(fs::path(out_dir) / "model.safetensors.index.json") << index.dump(2) << "\n";
  }
  // Everything else in the model folder (config, tokenizer, generation config) is copied.
  for (const auto& entry : fs::directory_iterator(model_dir)) {
    const std::string fname = entry.path().filename().string();
    if (!entry.is_regular_file()) continue;
    if (fname.find(".safetensors") != std::string::npos) continue;
    fs::copy_file(entry.path(), fs::path(out_dir) / fname, fs::copy_options::overwrite_existing, ec);
    if (ec) return Internal(out_dir + "/" + fname + ": copy failed: " + ec.message());
  }
  if (untie) {
    ASSIGN_OR_RETURN(std::string text, ReadTextFile((fs::path(model_dir) / "config.json").string()));
    nlohmann::ordered_json cfg = nlohmann::ordered_json::parse(text, nullptr, false);
    cfg["tie_word_embeddings"] = false;
    std::ofstream(fs::path(out_dir) / "config.json") << cfg.dump(2) << "\n";
  }
  return OkStatus();
}

}  // namespace loom
