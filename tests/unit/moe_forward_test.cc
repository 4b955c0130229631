// MoE forward: decode reads only the routed experts' weights, and routing follows the top-k rule.
#include <gtest/gtest.h>

#include <vector>

#include "model/arch/moe.h"
#include "model/model.h"

namespace loom {
namespace {

const std::string kModels = std::string(LOOM_FIXTURES) + "/models/";

// One decode row touches top_k experts' gate/up/down and nothing else of the expert stack:
// bytes read per token = top_k/num_experts of the layer's expert bytes (the active parameters).
TEST(MoeForwardTest, DecodeRowReadsOnlyTheRoutedExperts) {
  for (const char* name : {"qwen3_moe_bf16", "mixtral_f32"}) {
    SCOPED_TRACE(name);
    auto model = Model::Load(kModels + name);
    ASSERT_TRUE(model.ok()) << model.status().ToString();
    const ModelConfig& c = (*model)->config();
    const MoeWeights& w = (*model)->weights().layers[0].moe;
    ASSERT_EQ(static_cast<int>(w.experts.size()), c.moe.num_experts);
    const ExpertWeights& x = w.experts[0];
    const int64_t per_expert = static_cast<int64_t>(x.gate.weight.nbytes() + x.up.weight.nbytes() + x.down.weight.nbytes());
    std::vector<float> h(static_cast<size_t>(c.model_dim)), out(h.size());
    for (int t = 0; t < 20; ++t) {  // 20 different rows: each reads exactly top_k experts
      for (size_t i = 0; i < h.size(); ++i) h[i] = static_cast<float>(((i * 7 + static_cast<size_t>(t) * 13) % 17)) / 8.0f - 1.0f;
      EXPECT_EQ(MoeForward(w, c.moe, c.activation, h.data(), 1, out.data(), {}),
                c.moe.top_k * per_expert);
    }
    // A batch reads each routed expert once, at most the whole stack.
    std::vector<float> hb(static_cast<size_t>(64 * c.model_dim)), ob(hb.size());
    for (size_t i = 0; i < hb.size(); ++i) hb[i] = static_cast<float>((i * 31) % 23) / 11.0f - 1.0f;
    const int64_t batch_bytes = MoeForward(w, c.moe, c.activation, hb.data(), 64, ob.data(), {});
    EXPECT_LE(batch_bytes, c.moe.num_experts * per_expert);
    EXPECT_GE(batch_bytes, c.moe.top_k * per_expert);
  }
}

}  // namespace
}  // namespace loom
