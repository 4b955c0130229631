// libFuzzer target for ParseModelConfig over config.json bytes: any input gives a Status (no
// exception, no deep recursion, no huge allocation), and an accepted config stays within the
// caps of model/config.h. A quantization_config goes through CtConfig::Parse (compressed-tensors)
// the same way, and an accepted one answers Find for every projection name.
//
// Seeds: the fixture models' config.json files and the shared real configs (run-tests.sh and
// scripts/fuzz.sh pass them).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "base/json.h"
#include "model/compressed_tensors.h"
#include "model/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  if (auto j = loom::ParseJson(text, "fuzz/config.json");
      j.ok() && j->is_object() && j->contains("quantization_config")) {
    auto q = loom::CtConfig::Parse((*j)["quantization_config"], "fuzz/config.json");
    if (q.ok()) {
      for (const char* name : {"lm_head", "model.layers.0.self_attn.q_proj", "model.layers.1.mlp.down_proj"}) {
        const loom::CtScheme* s = q->Find(name);
        if (s && s->kind == loom::CtScheme::Kind::kInt4Group && s->group_size != 32 && s->group_size != 128) std::abort();
      }
    }
  }
  auto c = loom::ParseModelConfig(text, "", "fuzz/config.json");
  if (!c.ok()) return 0;
  if (c->num_layers < 1 || c->num_layers > loom::kMaxConfigLayers ||
      c->layers.size() != static_cast<size_t>(c->num_layers) || c->model_dim < 1 ||
      c->model_dim > loom::kMaxConfigModelDim || c->vocab_size < 1 ||
      c->vocab_size > loom::kMaxConfigVocab || c->head_dim < 2 || c->head_dim % 2 != 0 ||
      c->num_heads % c->num_kv_heads != 0 || !(c->rms_norm_eps > 0) || !(c->rope.theta > 0)) {
    std::abort();  // accepted a config outside the documented limits
  }
  return 0;
}
