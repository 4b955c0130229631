// Cost of the weight finite check at load: Model::Load, and Model::Load + the first token, with
// and without it (warm page cache, best of N).
//
//   loom_load_check_bench [MODEL_DIR] [REPEATS]
//   loom_load_check_bench --make DIR   (only writes the synthetic model into DIR)
// Without MODEL_DIR it writes a synthetic bf16 Llama (hidden 1024, ffn 2816, 8 layers, vocab
// 32000; ~330 MB) into a temp folder first (removed at the end). Prints one line per figure.
#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "io/safetensors.h"
#include "model/model.h"

namespace {

using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

std::string MakeSyntheticModel(std::string tmpl = "") {
  if (tmpl.empty()) {
    tmpl = (fs::temp_directory_path() / "loom_load_bench_XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr) return "";
  } else {
    fs::create_directories(tmpl);
  }
  const int d = 1024, f = 2816, layers = 8, vocab = 32000, heads = 16, kv = 4, hd = 64;
  std::ofstream(tmpl + "/config.json")
      << "{\"architectures\": [\"LlamaForCausalLM\"], \"vocab_size\": " << vocab
      << ", \"hidden_size\": " << d << ", \"intermediate_size\": " << f
      << ", \"num_hidden_layers\": " << layers << ", \"num_attention_heads\": " << heads
      << ", \"num_key_value_heads\": " << kv << ", \"max_position_embeddings\": 4096"
      << ", \"rms_norm_eps\": 1e-5, \"torch_dtype\": \"bfloat16\"}";
  std::vector<loom::TensorSpec> specs;
  auto add = [&](const std::string& name, std::vector<int64_t> shape) {
    specs.push_back({name, loom::DType::kBF16, std::move(shape)});
  };
  add("model.embed_tokens.weight", {vocab, d});
  for (int l = 0; l < layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    add(p + "input_layernorm.weight", {d});
    add(p + "post_attention_layernorm.weight", {d});
    add(p + "self_attn.q_proj.weight", {heads * hd, d});
    add(p + "self_attn.k_proj.weight", {kv * hd, d});
    add(p + "self_attn.v_proj.weight", {kv * hd, d});
    add(p + "self_attn.o_proj.weight", {d, heads * hd});
    add(p + "mlp.gate_proj.weight", {f, d});
    add(p + "mlp.up_proj.weight", {f, d});
    add(p + "mlp.down_proj.weight", {d, f});
  }
  add("model.norm.weight", {d});
  add("lm_head.weight", {vocab, d});
  std::mt19937 rng(1);
  std::normal_distribution<float> dist(0.0f, 0.02f);
  auto st = loom::WriteSafetensorsStreaming(
      tmpl + "/model.safetensors", specs, [&](size_t i, void* dst) {
        int64_t n = 1;
        for (int64_t x : specs[i].shape) n *= x;
        std::vector<float> v(static_cast<size_t>(n));
        const bool norm = specs[i].shape.size() == 1;
        for (float& x : v) x = norm ? 1.0f : dist(rng);
        loom::ConvertFromF32(loom::DType::kBF16, v.data(), dst, n);
        return loom::OkStatus();
      });
  if (!st.ok()) {
    std::fprintf(stderr, "%s\n", st.ToString().c_str());
    return "";
  }
  return tmpl;
}

struct Timing {
  double load_ms = 1e30;         // Model::Load
  double first_token_ms = 1e30;  // Model::Load + the first forward (1-token prompt)
};

// Best of `repeats` (warm page cache). The first forward after a load touches every weight
// page of the fresh mapping; the finite check touches them first, so part of its cost moves
// out of the first forward rather than adding to it.
Timing Measure(const std::string& dir, bool check, int repeats) {
  Timing best;
  for (int r = 0; r < repeats; ++r) {
    loom::LoadOptions o;
    o.check_weights = check;
    const auto t0 = Clock::now();
    auto m = loom::Model::Load(dir, o);
    const auto t1 = Clock::now();
    if (!m.ok()) {
      std::fprintf(stderr, "%s\n", m.status().ToString().c_str());
      std::exit(1);
    }
    loom::EngineOptions eo;
    eo.kv_cache_tokens = 64;
    loom::Engine engine(m->get(), eo);
    loom::GenerationRequest req;
    req.prompt = {1};
    req.params.max_tokens = 1;
    req.params.temperature = 0;
    (void)engine.Add(req);
    engine.Step();
    const auto t2 = Clock::now();
    best.load_ms = std::min(best.load_ms, std::chrono::duration<double, std::milli>(t1 - t0).count());
    best.first_token_ms =
        std::min(best.first_token_ms, std::chrono::duration<double, std::milli>(t2 - t0).count());
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3 && std::string(argv[1]) == "--make") return MakeSyntheticModel(argv[2]).empty();
  const bool synthetic = argc < 2;
  const std::string dir = synthetic ? MakeSyntheticModel() : argv[1];
  const int repeats = argc > 2 ? std::atoi(argv[2]) : 7;
  if (dir.empty()) return 1;
  Measure(dir, true, 1);  // warm the page cache
  Timing plain = Measure(dir, false, repeats), checked = Measure(dir, true, repeats);
  // Interleave a second round so drift in machine load hits both modes alike.
  Timing plain2 = Measure(dir, false, repeats), checked2 = Measure(dir, true, repeats);
  plain.load_ms = std::min(plain.load_ms, plain2.load_ms);
  plain.first_token_ms = std::min(plain.first_token_ms, plain2.first_token_ms);
  checked.load_ms = std::min(checked.load_ms, checked2.load_ms);
  checked.first_token_ms = std::min(checked.first_token_ms, checked2.first_token_ms);
  const auto store = loom::SafetensorsStore::Open(dir);
  const double gb = (*store)->total_bytes() / 1e9;
  std::printf("weights %.3f GB, best of %d x 2\n", gb, repeats);
  std::printf("Model::Load: %.2f ms without the check, %.2f ms with it (%.1f GB/s)\n",
              plain.load_ms, checked.load_ms, gb / ((checked.load_ms - plain.load_ms) / 1e3));
  std::printf("load + first token: %.2f ms without the check, %.2f ms with it: %+.1f%%\n",
              plain.first_token_ms, checked.first_token_ms,
              100.0 * (checked.first_token_ms - plain.first_token_ms) / plain.first_token_ms);
  if (synthetic) fs::remove_all(dir);
  return 0;
}
