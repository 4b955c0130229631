// Engine step: plan rows (Scheduler), group them by adapter, one Forward, sample, stream, retire.
#include "engine/engine.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>

#include "base/siphash.h"
#include "base/thread_pool.h"
#include "ops/basic_ops.h"

namespace loom {

const char* FinishReasonName(FinishReason r) {
  switch (r) {
    case FinishReason::kNone: return "none";
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kAbort: return "abort";
    case FinishReason::kError: return "error";
  }
  return "?";
}

namespace {
// Prompt-scoring rows per step: their logits (rows × vocabulary floats) within 128 MiB (441
// rows at a 152k vocabulary; a 512-row chunk took 311 MB, and 8192 rows 5 GB), at least 16.
int PromptLogprobRows(const Model& model) {
  const int64_t vocab = std::max(1, model.config().vocab_size);
  return static_cast<int>(std::clamp<int64_t>((int64_t{128} << 20) / (vocab * 4), 16, 1 << 30));
}

SchedulerOptions ToSchedulerOptions(const EngineOptions& o, const Model& model) {
  SchedulerOptions s;
  s.rope_switch_length = model.rope_switch_length();
  s.max_batch_tokens = o.max_batch_tokens;
  s.max_num_seqs = o.max_num_seqs;
  s.max_loras = o.max_loras;
  s.enable_prefix_caching = o.enable_prefix_caching;
  s.max_prompt_logprob_rows = PromptLogprobRows(model);
  return s;
}
}  // namespace

Status ValidateTargetStepMs(double ms, const std::string& flag) {
  if (!(ms >= 0 && ms <= 3.6e6)) return InvalidArgument(flag + " must be in [0, 3600000] (0 = off)");
  return OkStatus();
}

Engine::Engine(Model* model, const EngineOptions& options, const tokenizer::Tokenizer* tokenizer)
    : model_(model),
      options_(options),
      tokenizer_(tokenizer),
      max_model_len_(options.max_model_len > 0 ? options.max_model_len
                                               : model->config().max_position_embeddings),
      cache_(model->NewKvCache(options.kv_cache_tokens, options.kv_cache_dtype)),
      scheduler_(cache_.get(), ToSchedulerOptions(options, *model)) {
  if (tokenizer_ != nullptr && !tokenizer_->config().eos_token.empty()) {
    primary_eos_ = tokenizer_->TokenToId(tokenizer_->config().eos_token);
  }
}

int Engine::AddAdapter(std::shared_ptr<const Adapter> adapter) {
  registered_.push_back(std::move(adapter));
  return static_cast<int>(registered_.size()) - 1;
}

Status Engine::Validate(const GenerationRequest& request) const {
  const ModelConfig& c = model_->config();
  if (request.adapter == nullptr &&
      (request.adapter_slot < -1 || request.adapter_slot >= static_cast<int>(registered_.size()))) {
    return InvalidArgument("adapter slot " + std::to_string(request.adapter_slot) + " is not loaded");
  }
  if (request.prompt.empty()) return InvalidArgument("prompt is empty");
  for (int32_t t : request.prompt) {
    if (t < 0 || t >= c.vocab_size) {
      return InvalidArgument("prompt token id " + std::to_string(t) + " is outside the vocabulary [0, " +
                             std::to_string(c.vocab_size) + ")");
    }
  }
  for (int32_t t : request.stop_token_ids) {
    if (t < 0 || t >= c.vocab_size) {
      return InvalidArgument("stop_token_ids: " + std::to_string(t) +
                             " is outside the vocabulary [0, " + std::to_string(c.vocab_size) + ")");
    }
  }
  if ((!request.stop.empty() || request.detokenize) && tokenizer_ == nullptr) {
    return FailedPrecondition("stop strings and text output need the model folder's tokenizer.json");
  }
  RETURN_IF_ERROR(request.params.Validate(c.vocab_size));
  if (const auto& allowed = request.params.allowed_token_ids; allowed != nullptr) {
    // A token that min_tokens holds back at the first step, or a one-token bad word, is never
    // drawable there: if that leaves no allowed token, say so now (the step would fail with
    // "every logit is -inf").
    auto barred = [&](int32_t t) {
      auto in = [t](const std::vector<int32_t>& v) {
        return std::find(v.begin(), v.end(), t) != v.end();
      };
      if (request.params.min_tokens > 0 && (in(c.eos_token_ids) || in(request.stop_token_ids))) {
        return true;
      }
      for (const auto& w : request.params.bad_words_token_ids) {
        if (w.size() == 1 && w[0] == t) return true;
      }
      return false;
    };
    if (std::all_of(allowed->begin(), allowed->end(), barred)) {
      return InvalidArgument(
          "allowed_token_ids: every allowed token is barred at the first step (min_tokens holds "
          "back EOS and stop_token_ids; a one-token bad word is never drawn)");
    }
  }
  if (request.prompt_logprobs < -1 || request.prompt_logprobs > 20 ||
      request.prompt_logprobs > c.vocab_size) {
    return InvalidArgument("prompt_logprobs must be in [0, 20], got " +
                           std::to_string(request.prompt_logprobs));
  }
  const int64_t total = static_cast<int64_t>(request.prompt.size()) + request.params.max_tokens;
  if (total > max_model_len_) {
    // vLLM's words: clients (LiteLLM's context-window fallbacks among them) match on "This
    // model's maximum context length is".
    const std::string m = std::to_string(request.params.max_tokens);
    const std::string len = std::to_string(max_model_len_);
    const std::string in = std::to_string(request.prompt.size());
    return InvalidArgument("'max_tokens' or 'max_completion_tokens' is too large: " + m +
                           ". This model's maximum context length is " + len +
                           " tokens and your request has " + in + " input tokens (" + m + " > " +
                           len + " - " + in + ")");
  }
  if (KvCache::BlocksFor(static_cast<int>(total)) > cache_->num_blocks()) {
    return ResourceExhausted("prompt + max_tokens (" + std::to_string(total) +
                             " tokens) exceeds the KV cache (" +
                             std::to_string(cache_->num_blocks() * kKvBlockSize) + " tokens)");
  }
  return OkStatus();
}

StatusOr<int64_t> Engine::Add(GenerationRequest request) {
  RETURN_IF_ERROR(Validate(request));
  const int64_t id = next_id_++;
  AddValidated(std::move(request), id);
  return id;
}

void Engine::AddValidated(GenerationRequest request, int64_t id) {
  auto seq = std::make_unique<Sequence>();
  seq->id = id;
  next_id_ = std::max(next_id_, id + 1);
  seq->result.id = id;
  seq->result.prompt = request.prompt;
  seq->tokens = request.prompt;
  std::vector<int32_t> stop_tokens;  // what min_tokens holds back
  if (request.params.min_tokens > 0) {
    stop_tokens = model_->config().eos_token_ids;
    stop_tokens.insert(stop_tokens.end(), request.stop_token_ids.begin(),
                       request.stop_token_ids.end());
  }
  seq->sampler = std::make_unique<Sampler>(request.params, request.prompt, std::move(stop_tokens));
  if (request.adapter == nullptr && request.adapter_slot >= 0) {
    request.adapter = registered_[static_cast<size_t>(request.adapter_slot)];
  }
  seq->adapter_key = request.adapter ? request.adapter->cache_identity() : 0;
  if (!request.cache_salt.empty()) {
    seq->cache_salt_key =
        SipHash24(ProcessSipKey(), request.cache_salt.data(), request.cache_salt.size()) | 1;
  }
  if (tokenizer_ != nullptr && (request.detokenize || !request.stop.empty())) {
    const auto* primed = request.primed.get();
    if (primed != nullptr && primed->tokenizer() == tokenizer_ &&
        primed->skip_special_tokens() == request.skip_special_tokens) {
      seq->detokenizer = std::make_unique<tokenizer::StreamingDetokenizer>(*primed);
    } else {
      seq->detokenizer = std::make_unique<tokenizer::StreamingDetokenizer>(
          tokenizer_, request.skip_special_tokens);
      seq->detokenizer->Prime(request.prompt);  // the text continues the prompt's (vLLM)
    }
    request.primed.reset();
    seq->stop = StopChecker(request.stop, request.include_stop_str_in_output);
  }
  seq->request = std::move(request);
  scheduler_.Enqueue(std::move(seq));
}

bool Engine::Abort(int64_t id) {
  std::unique_ptr<Sequence> seq = scheduler_.Remove(id);
  if (seq == nullptr) return false;
  SequenceUpdate update;
  update.id = id;
  seq->result.finish_reason = FinishReason::kAbort;
  update.finish_reason = FinishReason::kAbort;
  update.prompt_tokens = static_cast<int>(seq->request.prompt.size());
  update.generated_tokens = static_cast<int>(seq->result.generated.size());
  if (emit_updates_) updates_.push_back(std::move(update));
  finished_.push_back(std::move(seq->result));
  return true;
}

const Adapter* Engine::AdapterOf(const Sequence& seq) const { return seq.request.adapter.get(); }

// Stop strings count once more than min_tokens tokens are out (vLLM: len(output) > min_tokens).
bool Engine::PastMinTokens(const Sequence& seq) {
  return static_cast<int64_t>(seq.result.generated.size()) > seq.request.params.min_tokens;
}

// The stop string the text completed is the stop reason, in place of a stop token id.
FinishReason Engine::StoppedByString(Sequence* seq, const std::string& matched,
                                     SequenceUpdate* update) {
  seq->result.stop_reason = matched;
  update->stop_reason = matched;
  seq->result.stop_token = -1;
  update->stop_token = -1;
  return FinishReason::kStop;
}

void Engine::Finish(Sequence* seq, FinishReason reason, SequenceUpdate* update) {
  // Whatever the detokenizer and the stop checker still hold is final text, unless a stop
  // string ended the sequence (then nothing after it is returned).
  if (seq->detokenizer != nullptr && seq->result.stop_reason.empty()) {
    std::string matched;
    update->text += seq->stop.Add(seq->detokenizer->Finish(), &matched, PastMinTokens(*seq));
    if (matched.empty()) {
      update->text += seq->stop.Flush();
    } else if (reason == FinishReason::kLength || reason == FinishReason::kStop) {
      // (An error or an abort keeps its reason: a failed sequence must not read as stopped.)
      // The held-back tail (an unfinished UTF-8 sequence flushed as U+FFFD, a byte-fallback
      // run) completed a stop string: as vLLM, which checks stop strings before max_tokens, and
      // whose output processor makes the stop string the stop_reason also when EOS or a stop
      // token ended the sequence (as ApplyDrawn does).
      reason = StoppedByString(seq, matched, update);
    }
  }
  seq->result.finish_reason = reason;
  update->finish_reason = reason;
  if (seq->detokenizer != nullptr) seq->result.text = seq->stop.text();
}

Engine::Drawn Engine::DrawRow(Sequence* seq, float* row) {
  const int vocab = model_->config().vocab_size;
  if (seq->request.return_step_logits) {
    seq->result.step_logits.insert(seq->result.step_logits.end(), row, row + vocab);
  }
  Drawn d;
  if (!seq->prompt_logprobs_error.empty()) {
    d.token = InvalidArgument(seq->prompt_logprobs_error);
    return d;
  }
  d.token = seq->sampler->Sample(row, vocab, &d.chosen, &d.top);
  return d;
}

void Engine::ApplyDrawn(Sequence* seq, Drawn drawn) {
  const ModelConfig& c = model_->config();
  SequenceUpdate update;
  update.id = seq->id;
  const StatusOr<int32_t>& sampled = drawn.token;
  TokenLogprob chosen = drawn.chosen;
  std::vector<TokenLogprob> top = std::move(drawn.top);
  if (!sampled.ok() && sampled.status().code() == StatusCode::kFailedPrecondition) {
    // The request's constraints left nothing to draw (allowed_token_ids with bad_words or
    // min_tokens): the sequence ends as if it had drawn EOS, with what it has (vLLM would draw
    // from a row of -inf; a 500 would blame the server).
    update.prompt_tokens = static_cast<int>(seq->request.prompt.size());
    update.generated_tokens = static_cast<int>(seq->result.generated.size());
    Finish(seq, FinishReason::kStop, &update);
    if (emit_updates_) updates_.push_back(std::move(update));
    return;
  }
  if (!sampled.ok()) {
    // Non-finite logits (a broken model or adapter): the sequence ends here without a token,
    // with the reason; other sequences in the step are unaffected.
    update.error = "request " + std::to_string(seq->id) + ": " + sampled.status().message();
    seq->result.error = update.error;
    update.prompt_tokens = static_cast<int>(seq->request.prompt.size());
    update.generated_tokens = static_cast<int>(seq->result.generated.size());
    Finish(seq, FinishReason::kError, &update);
    if (emit_updates_) updates_.push_back(std::move(update));
    return;
  }
  const int32_t token = *sampled;
  seq->sampler->Accept(token);
  seq->tokens.push_back(token);
  seq->result.generated.push_back(token);
  update.has_token = true;
  update.token = token;
  // The prompt's log-probs are copied, not moved: their count is also how many prompt positions
  // are scored (a preempted sequence's recompute must not score them again).
  if (emit_updates_ && seq->request.prompt_logprobs >= 0 && !seq->prompt_logprobs_sent) {
    seq->prompt_logprobs_sent = true;
    update.prompt_logprobs = seq->result.prompt_logprobs;
    update.prompt_ranks = seq->result.prompt_ranks;
    update.prompt_top_logprobs = seq->result.prompt_top_logprobs;
  }
  // With updates (the server), each token's log-probs go out with its update and the result
  // keeps none: they kept ~210 bytes a token (20 alternatives) for a result nobody reads.
  if (seq->request.params.logprobs > 0) {
    if (emit_updates_) {
      update.logprob = chosen;
      update.top = std::move(top);
    } else {
      seq->result.logprobs.push_back(chosen);
      seq->result.top_logprobs.push_back(std::move(top));
    }
  }
  FinishReason reason = FinishReason::kNone;
  const auto& eos = c.eos_token_ids;
  const auto& stop_ids = seq->request.stop_token_ids;
  bool stop_token = false;  // EOS or a stop token id ended it
  if (!seq->request.params.ignore_eos && std::find(eos.begin(), eos.end(), token) != eos.end()) {
    reason = FinishReason::kStop;
    stop_token = true;
    // As vLLM: only the tokenizer's EOS is EOS proper (stop_reason null); the model's other EOS
    // ids stop as stop token ids (Llama 3.1's <|eom_id|>: stop_reason 128008). Without a
    // tokenizer's eos_token every one is such an id (vLLM's update_from_generation_config with
    // eos_token_id None adds them all to stop_token_ids).
    if (token != primary_eos_) {
      update.stop_token = token;
      seq->result.stop_token = token;
    }
  } else if (std::find(stop_ids.begin(), stop_ids.end(), token) != stop_ids.end()) {
    reason = FinishReason::kStop;
    stop_token = true;
    update.stop_token = token;
    seq->result.stop_token = token;
  }
  if (seq->detokenizer != nullptr) {
    // As vLLM: the token that ends a sequence (EOS, a stop token id) is not part of the text
    // unless include_stop_str_in_output.
    std::string matched;
    if (!stop_token || seq->request.include_stop_str_in_output) {
      const bool check = PastMinTokens(*seq);
      update.text = seq->stop.Add(seq->detokenizer->Add(token), &matched, check);
      // Whole characters the detokenizer still holds (its doubling rule defers decodes of long
      // undecodable runs) are probed: if they would complete a stop string, they are released
      // here and the sequence stops on this token, as vLLM's (which decodes every step) would.
      if (matched.empty() && check && !seq->stop.empty() && reason == FinishReason::kNone) {
        const std::string held = seq->detokenizer->Peek();
        if (!held.empty() && seq->stop.WouldMatch(held)) {
          update.text += seq->stop.Add(seq->detokenizer->Finish(), &matched, true);
        }
      }
    }
    // A stop string in the text is the stop reason even when a stop token ended the sequence
    // (its text, with include_stop_str_in_output, completed the string), as vLLM's output
    // processor replaces stop_reason with the detokenizer's stop string.
    if (!matched.empty()) reason = StoppedByString(seq, matched, &update);
  }
  if (reason == FinishReason::kNone &&
      static_cast<int>(seq->result.generated.size()) >= seq->request.params.max_tokens) {
    reason = FinishReason::kLength;
  }
  update.prompt_tokens = static_cast<int>(seq->request.prompt.size());
  update.generated_tokens = static_cast<int>(seq->result.generated.size());
  update.cached_prompt_tokens = seq->result.num_cached_prompt_tokens;
  if (reason != FinishReason::kNone) Finish(seq, reason, &update);
  if (emit_updates_) updates_.push_back(std::move(update));
}

bool Engine::Step() {
  const auto start = std::chrono::steady_clock::now();
  StepPlan plan = scheduler_.Schedule();
  if (plan.rows.empty()) return false;
  int step_rows = 0;
  for (const auto& r : plan.rows) step_rows += r.second;
  const ModelConfig& c = model_->config();
  batch_.Clear();
  logit_owners_.clear();
  // This step's adapters get slots in order of first appearance; rows are grouped by slot so
  // each adapter's rows are one contiguous segment (the batch stays mixed). A slot is an
  // identity (the adapter's config and tensor bytes), as the scheduler's --max-loras count is:
  // two names loaded from the same bytes, or a copy reloaded unchanged beside the old one, are
  // one segment computing the same weights, not two.
  step_adapters_.clear();
  std::map<uint64_t, int> slot_of;
  for (auto& [s, count] : plan.rows) {
    const Adapter* a = AdapterOf(*s);
    if (a == nullptr) {
      s->adapter_slot = -1;
      continue;
    }
    auto [it, inserted] = slot_of.emplace(a->cache_identity(), static_cast<int>(step_adapters_.size()));
    if (inserted) step_adapters_.push_back(a);
    s->adapter_slot = it->second;
  }
  std::stable_sort(plan.rows.begin(), plan.rows.end(), [](const auto& a, const auto& b) {
    return a.first->adapter_slot < b.first->adapter_slot;
  });
  for (auto& [s, count] : plan.rows) {
    const int first_row = batch_.num_rows();
    const int slot = s->adapter_slot;
    if (!batch_.segments.empty() && batch_.segments.back().adapter_slot == slot) {
      batch_.segments.back().num_rows += count;
    } else {
      batch_.segments.push_back({first_row, count, slot});
    }
    batch_.AddChunk(s->tokens.data() + s->num_computed, count, s->num_computed,
                    s->block_table.data(), static_cast<int>(s->block_table.size()),
                    static_cast<int>(s->tokens.size()));
    const int prompt_len = static_cast<int>(s->request.prompt.size());
    const bool completes = s->num_computed + count == static_cast<int>(s->tokens.size());
    for (int i = 0; i < count; ++i) {
      const int pos = s->num_computed + i;
      const bool samples = completes && i == count - 1;
      const bool keep_prompt = s->request.return_prompt_logits && pos < prompt_len &&
                               s->num_preemptions == 0 && s->result.generated.empty();
      // Positions before the last prompt token predict the next one; a recomputation after a
      // preemption skips those already scored.
      const bool prompt_logprob = s->request.prompt_logprobs >= 0 && pos + 1 < prompt_len &&
                                  pos >= static_cast<int>(s->result.prompt_logprobs.size());
      if (samples || keep_prompt || prompt_logprob) {
        batch_.logit_rows.push_back(first_row + i);
        logit_owners_.push_back({s, samples, keep_prompt ? pos : -1, prompt_logprob});
      }
    }
  }
  const size_t vocab = static_cast<size_t>(c.vocab_size);
  logits_.resize(batch_.logit_rows.size() * vocab);
  model_->Forward(batch_, cache_.get(), logits_.data(),
                  step_adapters_.empty() ? nullptr : &step_adapters_);
  ++steps_;
  step_counts_.tokens.Observe(step_rows);
  step_counts_.sequences.Observe(static_cast<double>(plan.rows.size()));
  step_counts_.adapters.Observe(static_cast<double>(step_adapters_.size()));
  for (auto& [s, count] : plan.rows) {
    s->num_computed += count;
    scheduler_.PublishBlocks(s);
  }

  // Prompt logits first (sampling applies penalties to its row in place), then every sampled
  // row's draw over the pool — each touches only its own sequence's sampler; at batch 32 with
  // log-probs the rows took ~20 ms of a step one after another — then the bookkeeping in row
  // order on this thread.
  sample_rows_.clear();
  for (size_t i = 0; i < logit_owners_.size(); ++i) {
    const RowOwner& owner = logit_owners_[i];
    const float* row = logits_.data() + i * vocab;
    if (owner.prompt_index >= 0) {
      auto& pl = owner.seq->result.prompt_logits;
      pl.resize(owner.seq->request.prompt.size() * vocab);
      std::copy(row, row + vocab, pl.begin() + static_cast<long>(owner.prompt_index * vocab));
    }
    if (owner.samples) sample_rows_.push_back(i);
  }
  ComputePromptLogprobs();
  drawn_.resize(sample_rows_.size());
  auto draw = [&](int64_t k, int) {
    const size_t i = sample_rows_[static_cast<size_t>(k)];
    drawn_[static_cast<size_t>(k)] = DrawRow(logit_owners_[i].seq, logits_.data() + i * vocab);
  };
  if (sample_rows_.size() > 1) {
    ThreadPool::Global().ParallelFor(static_cast<int64_t>(sample_rows_.size()), draw);
  } else if (!sample_rows_.empty()) {
    draw(0, 0);
  }
  std::vector<Sequence*> done;
  for (size_t k = 0; k < sample_rows_.size(); ++k) {
    Sequence* s = logit_owners_[sample_rows_[k]].seq;
    ApplyDrawn(s, std::move(drawn_[k]));
    if (s->result.finish_reason != FinishReason::kNone) {
      done.push_back(s);
    } else if (const int sw = model_->rope_switch_length();
               sw > 0 && s->tokens.size() == static_cast<size_t>(sw) + 1) {
      // Longrope: the sequence just outgrew the short factors; transformers' full forward now
      // rotates every position with the long ones, so its cached K are recomputed.
      scheduler_.Recompute(s);
    }
  }
  for (Sequence* s : done) {
    std::unique_ptr<Sequence> owned = scheduler_.Retire(s);
    finished_.push_back(std::move(owned->result));
  }
  if (options_.target_step_ms > 0) UpdateStepBudget(start, step_rows);
  // Logit rows: one per running sequence, and prompt-scoring chunks (≤ 128 MiB, the
  // scheduler's cap); more (a test's return_prompt_logits chunk) is not kept past its step.
  const size_t keep_rows =
      static_cast<size_t>(std::max({64, options_.max_num_seqs, PromptLogprobRows(*model_)}));
  if (logits_.capacity() > keep_rows * vocab) std::vector<float>().swap(logits_);
  return true;
}

void Engine::ComputePromptLogprobs() {
  const size_t vocab = static_cast<size_t>(model_->config().vocab_size);
  std::vector<size_t> rows;       // into logit_owners_
  std::vector<size_t> positions;  // the prompt position of each (a sequence's rows are
                                  // consecutive, in position order)
  for (size_t i = 0; i < logit_owners_.size(); ++i) {
    if (!logit_owners_[i].prompt_logprob) continue;
    const Sequence* s = logit_owners_[i].seq;
    const bool same = !rows.empty() && logit_owners_[rows.back()].seq == s;
    positions.push_back(same ? positions.back() + 1 : s->result.prompt_logprobs.size());
    rows.push_back(i);
  }
  if (rows.empty()) return;
  struct Scored {
    TokenLogprob chosen{};
    int32_t rank = 0;
    std::vector<TokenLogprob> top;
    std::string error;
  };
  std::vector<Scored> scored(rows.size());
  // Each row is an independent O(vocab) pass (~0.3 ms at 152k): over the pool.
  auto score = [&](int64_t k, int) {
    const size_t i = rows[static_cast<size_t>(k)];
    const Sequence* s = logit_owners_[i].seq;
    const float* row = logits_.data() + i * vocab;
    const size_t pos = positions[static_cast<size_t>(k)];
    Scored& out = scored[static_cast<size_t>(k)];
    int64_t best = -1, bad = -1;
    ScanLogitsRow(row, static_cast<int64_t>(vocab), &best, &bad);
    if (bad >= 0 || best < 0) {
      out.error = "prompt position " + std::to_string(pos) + ": " +
                  (bad >= 0 ? "logit of token " + std::to_string(bad) + " is not finite"
                            : std::string("every logit is -inf")) +
                  " (non-finite model output; check the weights)";
      return;
    }
    const int32_t next = s->request.prompt[pos + 1];
    ComputeLogprobs(row, static_cast<int>(vocab), next, s->request.prompt_logprobs, &out.chosen,
                    &out.top);
    out.rank = TokenRank(row, static_cast<int>(vocab), next);
  };
  if (rows.size() > 1) {
    ThreadPool::Global().ParallelFor(static_cast<int64_t>(rows.size()), score);
  } else {
    score(0, 0);
  }
  for (size_t k = 0; k < rows.size(); ++k) {
    Sequence* s = logit_owners_[rows[k]].seq;
    // A non-finite row fails the sequence at its next draw; the entry keeps the positions
    // lined up meanwhile.
    if (!scored[k].error.empty() && s->prompt_logprobs_error.empty()) {
      s->prompt_logprobs_error = scored[k].error;
    }
    s->result.prompt_logprobs.push_back(scored[k].chosen);
    s->result.prompt_ranks.push_back(scored[k].rank);
    s->result.prompt_top_logprobs.push_back(std::move(scored[k].top));
  }
}

void Engine::UpdateStepBudget(std::chrono::steady_clock::time_point start, int rows) {
  // Small steps are dominated by reading the weights once, not by their rows: not a measure
  // of the cost of a row. Above kMinRows that fixed cost still inflates ms per row a little,
  // so R errs towards shorter steps.
  constexpr int kMinRows = 16;
  if (rows < kMinRows) return;
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  const double per_row = ms / rows;
  ms_per_row_ = ms_per_row_ == 0 ? per_row : 0.8 * ms_per_row_ + 0.2 * per_row;
  const double target_rows = options_.target_step_ms / ms_per_row_;
  scheduler_.set_rows_while_decoding(
      static_cast<int>(std::clamp(target_rows, 1.0, static_cast<double>(options_.max_batch_tokens))));
}

std::vector<SequenceUpdate> Engine::TakeUpdates() {
  std::vector<SequenceUpdate> out;
  out.swap(updates_);
  return out;
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
