// Perplexity over windows of a token sequence: prompt logits from the engine, log-softmax in double.
#include "engine/perplexity.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "engine/engine.h"

namespace loom {

double PerplexityResult::Perplexity() const {
  return predicted > 0 ? std::exp(nll_sum / static_cast<double>(predicted)) : 0.0;
}

StatusOr<PerplexityResult> ComputePerplexity(Model* model, const std::vector<int32_t>& tokens,
                                             int ctx, std::shared_ptr<const Adapter> adapter,
                                             KvDtype kv_dtype) {
  const ModelConfig& c = model->config();
  if (ctx < 2) return InvalidArgument("--ctx " + std::to_string(ctx) + ": needs at least 2 tokens");
  if (c.max_position_embeddings > 0 && ctx > c.max_position_embeddings) {
    return InvalidArgument("--ctx " + std::to_string(ctx) + " exceeds the model's " +
                           std::to_string(c.max_position_embeddings) + " positions");
  }
  if (tokens.size() < 2) return InvalidArgument("perplexity needs at least 2 tokens, got " +
                                                std::to_string(tokens.size()));
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || tokens[i] >= c.vocab_size) {
      return InvalidArgument("token " + std::to_string(tokens[i]) + " at position " +
                             std::to_string(i) + " is outside the vocabulary (" +
                             std::to_string(c.vocab_size) + ")");
    }
  }
  RETURN_IF_ERROR(model->CheckKvCacheTokens(ctx + 1, kv_dtype));
  EngineOptions options;
  options.kv_cache_dtype = kv_dtype;
  options.kv_cache_tokens = std::max(256, ctx + 16);
  // A window in chunks of 512 rows (the same bits as one step: rows are batch-invariant), not
  // one step of ctx rows, whose working memory grows with it.
  options.max_batch_tokens = 512;
  RETURN_IF_ERROR(model->CheckStepMemory(options.max_batch_tokens, ctx + 1));
  options.enable_prefix_caching = false;
  // A window of the model's whole length is valid; the one token the engine samples after it
  // (position ctx, never scored) needs room beyond, so the length limit is ctx + 1 then.
  if (ctx + 1 > c.max_position_embeddings) options.max_model_len = ctx + 1;
  Engine engine(model, options);
  const int slot = adapter ? engine.AddAdapter(adapter) : -1;
  const int64_t vocab = c.vocab_size;
  PerplexityResult out;
  for (size_t start = 0; start + 1 < tokens.size(); start += static_cast<size_t>(ctx)) {
    const size_t end = std::min(tokens.size(), start + static_cast<size_t>(ctx));
    GenerationRequest r;
    r.prompt.assign(tokens.begin() + static_cast<std::ptrdiff_t>(start),
                    tokens.begin() + static_cast<std::ptrdiff_t>(end));
    r.params.max_tokens = 1;
    r.params.temperature = 0;
    r.params.ignore_eos = true;
    r.return_prompt_logits = true;
    r.adapter_slot = slot;
    ASSIGN_OR_RETURN(int64_t id, engine.Add(std::move(r)));
    (void)id;
    std::vector<GenerationResult> results = engine.RunToCompletion();
    if (results.size() != 1 || results[0].prompt_logits.size() != (end - start) * static_cast<size_t>(vocab)) {
      return Internal("perplexity: the engine returned no prompt logits for window at token " +
                      std::to_string(start));
    }
    const std::vector<float>& logits = results[0].prompt_logits;  // [len, vocab]
    for (size_t t = start + 1; t < end; ++t) {
      const float* row = logits.data() + (t - 1 - start) * static_cast<size_t>(vocab);
      double mx = row[0];
      for (int64_t v = 1; v < vocab; ++v) mx = std::max(mx, static_cast<double>(row[v]));
      double sum = 0;
      for (int64_t v = 0; v < vocab; ++v) sum += std::exp(static_cast<double>(row[v]) - mx);
      const double nll = -(static_cast<double>(row[tokens[t]]) - mx - std::log(sum));
      out.nll_sum += nll;
      out.token_nll.push_back(static_cast<float>(nll));
      ++out.predicted;
    }
    ++out.windows;
  }
  return out;
}

}  // namespace loom
