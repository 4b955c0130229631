// libFuzzer target for adapter tensors: the input is an adapter_model.safetensors, loaded with a
// fixed all-linear adapter_config.json against the llama_f32 fixture model. Any bytes give a
// Status (shapes, ranks, dtypes, offsets, non-finite values all checked); an accepted adapter's
// weights are read end to end.
//
// Seeds: every fixture adapter's adapter_model.safetensors (those of other bases are refused
// by shape, which is a path worth covering too).
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "lora/adapter.h"
#include "model/model.h"

namespace {

struct Fixture {
  std::unique_ptr<loom::Model> model;
  std::string dir;
};

const Fixture& Get() {
  static const Fixture f = [] {
    Fixture f;
    auto m = loom::Model::Load(std::string(LOOM_FIXTURES) + "/models/llama_f32");
    if (!m.ok()) {
      std::fprintf(stderr, "adapter_fuzz: %s\n", m.status().ToString().c_str());
      std::abort();
    }
    f.model = std::move(m).value();
    std::string tmpl = (std::filesystem::temp_directory_path() / "loom_adapter_fuzz_XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr) std::abort();
    f.dir = tmpl;
    // Removed when the fuzzer exits (every run left a folder in /tmp).
    static std::string to_remove = f.dir;
    std::atexit([] {
      std::error_code ignored;
      std::filesystem::remove_all(to_remove, ignored);
    });
    std::ofstream(f.dir + "/adapter_config.json")
        << R"({"peft_type": "LORA", "r": 8, "lora_alpha": 16, "target_modules": "all-linear",
              "rank_pattern": {"q_proj": 8, "k_proj": 4, "v_proj": 8, "o_proj": 4,
                               "gate_proj": 4, "up_proj": 4, "down_proj": 6}})";
    return f;
  }();
  return f;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const Fixture& f = Get();
  {
    std::ofstream out(f.dir + "/adapter_model.safetensors", std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }
  auto a = loom::LoadAdapter("fuzz", f.dir, f.model->sites(), 0);
  if (!a.ok()) return 0;
  float sink = 0;
  for (const loom::LoraWeights* lw : (*a)->modules()) {
    const auto* b = static_cast<const uint8_t*>(lw->a.data);
    for (size_t i = 0; i < lw->a.nbytes(); ++i) sink += b[i];
  }
  if (sink < 0) std::abort();
  return 0;
}
