// Token-level perplexity of a token sequence under a model (and optionally an adapter), in windows of a fixed context.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "base/status.h"
#include "lora/adapter.h"
#include "model/model.h"

namespace loom {

struct PerplexityResult {
  double nll_sum = 0;          // Σ −log p(token | window prefix), natural log
  int64_t predicted = 0;       // tokens scored: Σ over windows of (window length − 1)
  int64_t windows = 0;
  std::vector<float> token_nll;  // [predicted] each scored token's −log p, in order
  double Perplexity() const;   // exp(nll_sum / predicted)
};

// Splits `tokens` into consecutive non-overlapping windows of `ctx` tokens (the last may be
// shorter; one of a single token is dropped) and scores each window on its own: token t of a
// window is predicted from the window's tokens before it, its log-probability taken from a
// log-softmax (in double) of the f32 logits. This is the reference's loop (tools/ref/
// make_perplexity.py: transformers, stride = ctx). Windows run one at a time through an engine
// with prefix caching off. `adapter` may be null (the base model). Errors: ctx < 2, fewer than 2
// tokens, a token id outside the vocabulary, a ctx beyond the model's positions.
StatusOr<PerplexityResult> ComputePerplexity(Model* model, const std::vector<int32_t>& tokens,
                                             int ctx,
                                             std::shared_ptr<const Adapter> adapter = nullptr,
                                             KvDtype kv_dtype = KvDtype::kF32);

}  // namespace loom
