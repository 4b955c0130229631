// libFuzzer target for generation_config.json bytes, parsed beside a fixed valid config.json:
// any input gives a Status, and accepted eos ids lie in the vocabulary.
//
// Seeds: the fixture models' generation_config.json files.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "model/config.h"

namespace {
const char kConfig[] = R"({"architectures": ["LlamaForCausalLM"], "vocab_size": 256,
  "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
  "num_attention_heads": 4, "num_key_value_heads": 2, "rms_norm_eps": 1e-5})";
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto c = loom::ParseModelConfig(kConfig, text, "fuzz/config.json");
  if (!c.ok()) return 0;
  for (int id : c->eos_token_ids) {
    if (id < 0 || id >= c->vocab_size) std::abort();
  }
  return 0;
}
