// libFuzzer target for ParseModelConfig over config.json bytes: any input gives a Status (no
// exception, no deep recursion, no huge allocation), and an accepted config stays within the
// caps of model/config.h. A quantization_config goes through every reader of one
// (compressed-tensors, GPTQ/AWQ, bitsandbytes) the same way, and what each accepts is within its
// documented values (groups, bits, projection lookups).
//
// Seeds: the fixture models' config.json files and the shared real configs (run-tests.sh and
// scripts/fuzz.sh pass them).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "base/json.h"
#include "model/bnb.h"
#include "model/compressed_tensors.h"
#include "model/config.h"
#include "model/gptq.h"

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
    const nlohmann::json& qc = (*j)["quantization_config"];
    if (qc.is_object()) {
      if (auto g = loom::GptqConfig::Parse(qc, "fuzz/config.json"); g.ok()) {
        const int gs = g->group_size;
        if (!(gs == -1 || (gs >= 32 && gs <= 8192 && gs % 32 == 0))) std::abort();
        (void)g->Name();
      }
      if (auto b = loom::BnbConfig::Parse(qc, "fuzz/config.json"); b.ok()) {
        if (b->bits != 4 && b->bits != 8) std::abort();
        for (const char* name : {"lm_head", "model.layers.0.self_attn.q_proj", "model.layers.11.mlp.down_proj"}) {
          (void)b->Skipped(name);
        }
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
