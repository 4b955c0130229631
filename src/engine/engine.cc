// Engine step: decode rows first, then prefill chunks up to the row budget, one Forward.
#include "engine/engine.h"

#include <algorithm>
#include <cstdio>

namespace loom {

const char* FinishReasonName(FinishReason r) {
  switch (r) {
    case FinishReason::kNone: return "none";
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
  }
  return "?";
}

Engine::Engine(Model* model, const EngineOptions& options) : model_(model), options_(options) {
  const ModelConfig& c = model->config();
  max_model_len_ = options.max_model_len > 0 ? options.max_model_len : c.max_position_embeddings;
  cache_ = model->NewKvCache(options.kv_cache_tokens);
}

int Engine::AddAdapter(std::shared_ptr<const Adapter> adapter) {
  adapters_.push_back(adapter.get());
  adapter_owners_.push_back(std::move(adapter));
  return static_cast<int>(adapters_.size()) - 1;
}

StatusOr<int64_t> Engine::Add(GenerationRequest request) {
  const ModelConfig& c = model_->config();
  if (request.adapter_slot < -1 || request.adapter_slot >= static_cast<int>(adapters_.size())) {
    return InvalidArgument("adapter slot " + std::to_string(request.adapter_slot) + " is not loaded");
  }
  if (request.prompt.empty()) return InvalidArgument("prompt is empty");
  for (int32_t t : request.prompt) {
    if (t < 0 || t >= c.vocab_size) {
      return InvalidArgument("prompt token id " + std::to_string(t) + " is outside the vocabulary [0, " +
                             std::to_string(c.vocab_size) + ")");
    }
  }
  RETURN_IF_ERROR(request.params.Validate(c.vocab_size));
  const int64_t total = static_cast<int64_t>(request.prompt.size()) + request.params.max_tokens;
  if (total > max_model_len_) {
    return InvalidArgument("prompt (" + std::to_string(request.prompt.size()) + " tokens) + max_tokens (" +
                           std::to_string(request.params.max_tokens) +
                           ") exceeds the maximum context length " + std::to_string(max_model_len_));
  }
  if (KvCache::BlocksFor(static_cast<int>(total)) > cache_->num_blocks()) {
    return ResourceExhausted("prompt + max_tokens (" + std::to_string(total) +
                             " tokens) exceeds the KV cache (" +
                             std::to_string(cache_->num_blocks() * kKvBlockSize) + " tokens)");
  }
  auto seq = std::make_unique<Sequence>();
  seq->result.id = next_id_++;
  seq->result.prompt = request.prompt;
  seq->tokens = request.prompt;
  seq->sampler = std::make_unique<Sampler>(request.params, request.prompt);
  seq->request = std::move(request);
  const int64_t id = seq->result.id;
  waiting_.push_back(std::move(seq));
  return id;
}

bool Engine::Admit() {
  bool any = false;
  while (!waiting_.empty() && static_cast<int>(running_.size()) < options_.max_num_seqs) {
    Sequence& seq = *waiting_.front();
    const int need = static_cast<int>(seq.request.prompt.size()) + seq.request.params.max_tokens;
    if (!cache_->Reserve(&seq.block_table, need)) break;  // waits for blocks to free up
    running_.push_back(std::move(waiting_.front()));
    waiting_.pop_front();
    any = true;
  }
  return any;
}

void Engine::Finish(Sequence& seq, FinishReason reason) {
  seq.result.finish_reason = reason;
  cache_->Release(&seq.block_table);
  finished_.push_back(std::move(seq.result));
}

bool Engine::Step() {
  Admit();
  if (running_.empty()) return false;
  const ModelConfig& c = model_->config();
  batch_.Clear();
  logit_owners_.clear();
  int budget = options_.max_batch_tokens;
  // Decode rows (one each) go first so running sequences never starve behind long prompts.
  std::vector<Sequence*> order;
  for (auto& s : running_) {
    if (static_cast<int>(s->tokens.size()) - s->num_computed == 1) order.push_back(s.get());
  }
  for (auto& s : running_) {
    if (static_cast<int>(s->tokens.size()) - s->num_computed > 1) order.push_back(s.get());
  }
  // Rows per sequence in priority order, then grouped by adapter so each adapter's rows are
  // one contiguous segment (the batch stays mixed: any adapters and the base together).
  std::vector<std::pair<Sequence*, int>> scheduled;
  for (Sequence* s : order) {
    if (budget == 0) break;
    const int remaining = static_cast<int>(s->tokens.size()) - s->num_computed;
    const int count = std::min(remaining, budget);
    budget -= count;
    scheduled.emplace_back(s, count);
  }
  std::stable_sort(scheduled.begin(), scheduled.end(), [](const auto& a, const auto& b) {
    return a.first->request.adapter_slot < b.first->request.adapter_slot;
  });
  for (auto& [s, count] : scheduled) {
    const int first_row = batch_.num_rows();
    const int slot = s->request.adapter_slot;
    if (!batch_.segments.empty() && batch_.segments.back().adapter_slot == slot) {
      batch_.segments.back().num_rows += count;
    } else {
      batch_.segments.push_back({first_row, count, slot});
    }
    batch_.AddChunk(s->tokens.data() + s->num_computed, count, s->num_computed,
                    s->block_table.data(), static_cast<int>(s->block_table.size()));
    const int prompt_len = static_cast<int>(s->request.prompt.size());
    const bool completes = s->num_computed + count == static_cast<int>(s->tokens.size());
    for (int i = 0; i < count; ++i) {
      const int pos = s->num_computed + i;
      const bool samples = completes && i == count - 1;
      const bool keep_prompt = s->request.return_prompt_logits && pos < prompt_len;
      if (samples || keep_prompt) {
        batch_.logit_rows.push_back(first_row + i);
        logit_owners_.push_back({s, samples, keep_prompt ? pos : -1});
      }
    }
  }
  const size_t vocab = static_cast<size_t>(c.vocab_size);
  logits_.resize(batch_.logit_rows.size() * vocab);
  model_->Forward(batch_, cache_.get(), logits_.data(), adapters_.empty() ? nullptr : &adapters_);
  ++steps_;
  for (auto& [s, count] : scheduled) s->num_computed += count;

  std::vector<Sequence*> failed;  // sampling failed this step
  for (size_t i = 0; i < logit_owners_.size(); ++i) {
    const RowOwner& owner = logit_owners_[i];
    Sequence& s = *owner.seq;
    float* row = logits_.data() + i * vocab;
    if (owner.prompt_index >= 0) {
      auto& pl = s.result.prompt_logits;
      pl.resize(s.request.prompt.size() * vocab);
      std::copy(row, row + vocab, pl.begin() + static_cast<long>(owner.prompt_index * vocab));
    }
    if (!owner.samples) continue;
    if (s.request.return_step_logits) {
      s.result.step_logits.insert(s.result.step_logits.end(), row, row + vocab);
    }
    TokenLogprob chosen{};
    std::vector<TokenLogprob> top;
    auto sampled = s.sampler->Sample(row, c.vocab_size, &chosen, &top);
    if (!sampled.ok()) {  // non-finite logits: the sequence ends here, without a token
      std::fprintf(stderr, "error: request %lld: %s\n", static_cast<long long>(s.result.id),
                   sampled.status().message().c_str());
      failed.push_back(&s);
      continue;
    }
    const int32_t token = *sampled;
    s.sampler->Accept(token);
    s.tokens.push_back(token);
    s.result.generated.push_back(token);
    if (s.request.params.logprobs > 0) {
      s.result.logprobs.push_back(chosen);
      s.result.top_logprobs.push_back(std::move(top));
    }
  }
  // Retire finished sequences.
  for (auto it = running_.begin(); it != running_.end();) {
    Sequence& s = **it;
    FinishReason reason = FinishReason::kNone;
    if (std::find(failed.begin(), failed.end(), &s) != failed.end()) {
      reason = FinishReason::kStop;
    } else if (!s.result.generated.empty() && s.num_computed + 1 == static_cast<int>(s.tokens.size())) {
      const int32_t last = s.result.generated.back();
      const auto& eos = c.eos_token_ids;
      if (!s.request.params.ignore_eos && std::find(eos.begin(), eos.end(), last) != eos.end()) {
        reason = FinishReason::kStop;
      } else if (static_cast<int>(s.result.generated.size()) >= s.request.params.max_tokens) {
        reason = FinishReason::kLength;
      }
    }
    if (reason != FinishReason::kNone) {
      Finish(s, reason);
      it = running_.erase(it);
    } else {
      ++it;
    }
  }
  return true;
}

std::vector<GenerationResult> Engine::TakeFinished() {
  std::vector<GenerationResult> out;
  out.swap(finished_);
  return out;
}

std::vector<GenerationResult> Engine::RunToCompletion() {
  std::vector<GenerationResult> out;
  while (HasWork()) {
    if (!Step() && !HasWork()) break;
    for (auto& r : TakeFinished()) out.push_back(std::move(r));
  }
  for (auto& r : TakeFinished()) out.push_back(std::move(r));
  return out;
}

}  // namespace loom
