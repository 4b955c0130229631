// LoraSite: which projection a Linear is, so an adapter's weights for it can be found.
#pragma once

namespace loom {

// Projections of a Llama-family layer, in the order LayerWeights declares them.
enum class LoraModule { kQ, kK, kV, kO, kGate, kUp, kDown };
constexpr int kLoraModulesPerLayer = 7;

// Projection `module` of `layer`, or the output head.
struct LoraSite {
  int layer = -1;
  LoraModule module = LoraModule::kQ;
  bool lm_head = false;
};

}  // namespace loom
