// Loads the transformers reference dumps under tests/fixtures/golden/ for the golden tests.
#pragma once

#include <string>
#include <vector>

#include "engine/engine.h"
#include "lora/adapter.h"
#include "model/model.h"

namespace loom::test {

struct GoldenModel {
  std::string name;                                // e.g. "llama_bf16"
  std::string model_dir;                           // tests/fixtures/models/<name>
  std::vector<std::vector<int32_t>> prompts;       // [prompt][len]
  std::vector<std::vector<int32_t>> greedy;        // [prompt][32]
  // [prompt][step][5] (id, logprob), logprob descending
  std::vector<std::vector<std::vector<std::pair<int32_t, float>>>> top_logprobs;
  std::vector<std::vector<float>> prompt_logits;   // [prompt][len * vocab]
  std::vector<std::vector<float>> greedy_logits;   // [prompt][32 * vocab]
};

GoldenModel LoadGolden(const std::string& name);

// The reference models: {llama, mistral, qwen2, qwen3, gemma2, gemma3} × {f32, bf16}.
std::vector<std::string> GoldenModelNames();

// Tolerance the issue states: 1e-4 for f32 weights, 2e-3 for bf16 weights.
float GoldenTolerance(const std::string& name);

float MaxAbsDiff(const float* a, const float* b, size_t n);

// The projection of `m` named `name` ("model.layers.L.self_attn.q_proj", experts, lm_head), or null.
const Linear* FindProjection(const Model& m, const std::string& name);

// A quantized model's logit error against a reference, over any number of prompts: the largest
// single difference and the relative RMS error ‖got − ref‖ / ‖ref‖.
struct LogitError {
  float worst = 0;
  double err2 = 0, ref2 = 0;
  void Add(const std::vector<float>& got, const std::vector<float>& ref);
  double RelativeRms() const;
};

// Runs `requests` through one engine with a 7-row step budget, each arriving 3 steps after the
// previous, so prefill chunks and decode rows of different sequences share steps. Returns the
// results in request order (empty, with a test failure, when one is refused or missing).
std::vector<GenerationResult> RunStaggered(Model* model, const std::vector<GenerationRequest>& requests);

// Compares one finished greedy request (logprobs 5, prompt and step logits returned) with the
// reference of prompt p: prompt logits (when check_prompt), greedy tokens, and — while the
// tokens agree — step logits and top-5 log-probs, each within `tol`. Returns the largest logit
// difference compared.
float ExpectGoldenMatch(const GoldenModel& golden, const GenerationResult& r, size_t p, int vocab,
                        float tol, bool check_prompt = true);

// Prompt p runs with adapter slot p % (adapters + 1) − 1 (base rows and every adapter,
// interleaved; 10 greedy tokens, top-2 log-probs). Expects each adapter to move its prompt's first
// log-prob away from the base's, and one staggered mixed batch of all prompts to give every
// request exactly (bitwise) what it gives alone. `names[i]` names adapters[i] in messages.
void ExpectAdaptersAppliedAndMixedBatchEqualsAlone(
    Model* model, const std::vector<std::shared_ptr<const Adapter>>& adapters,
    const std::vector<std::string>& names, const std::vector<std::vector<int32_t>>& prompts);

}  // namespace loom::test
