// Scheduler: decode first, then prefill chunks, then FCFS admission under blocks and max_loras.
#include "engine/scheduler.h"

#include <algorithm>

#include "base/siphash.h"
#include "lora/adapter.h"

namespace loom {

Scheduler::Scheduler(KvCache* cache, const SchedulerOptions& options)
    : cache_(cache), options_(options) {}

// A request that needs every prompt position's logits computes them all.
bool Scheduler::UsesPrefixCache(const Sequence& seq) {
  return !seq.request.return_prompt_logits && seq.request.prompt_logprobs < 0;
}

int Scheduler::ChunkRows(const Sequence& seq, StepBudget* budget) const {
  int rows = std::min(seq.remaining(), budget->rows);
  if (seq.request.prompt_logprobs < 0) return rows;
  // Positions [begin, end) still to score (a recomputation after a preemption runs the ones
  // already scored again without logits: those rows are not capped).
  const int64_t begin =
      std::max<int64_t>(seq.num_computed, static_cast<int64_t>(seq.result.prompt_logprobs.size()));
  const int64_t end = static_cast<int64_t>(seq.request.prompt.size()) - 1;
  if (begin >= end) return rows;
  rows = static_cast<int>(std::min<int64_t>(rows, begin - seq.num_computed + budget->scoring_rows));
  budget->scoring_rows -=
      static_cast<int>(std::clamp<int64_t>(seq.num_computed + rows - begin, 0, end - begin));
  return rows;
}

void Scheduler::Enqueue(std::unique_ptr<Sequence> seq) {
  seq->arrival = next_arrival_++;
  waiting_.push_back(std::move(seq));
}

std::set<uint64_t> Scheduler::RunningAdapters() const {
  std::set<uint64_t> out;
  for (const auto& s : running_) {
    if (s->adapter_key != 0) out.insert(s->adapter_key);
  }
  return out;
}

void Scheduler::Preempt(Sequence* victim, StepPlan* plan) {
  cache_->Release(&victim->block_table);
  victim->num_computed = 0;
  victim->num_cached_prompt = 0;
  victim->block_keys.clear();
  ++victim->num_preemptions;
  ++num_preemptions_;
  plan->preempted.push_back(victim);
  auto it = std::find_if(running_.begin(), running_.end(),
                         [&](const auto& s) { return s.get() == victim; });
  std::unique_ptr<Sequence> owned = std::move(*it);
  running_.erase(it);
  // Back to the queue in arrival order (it is older than anything that arrived after it).
  auto pos = std::find_if(waiting_.begin(), waiting_.end(),
                          [&](const auto& w) { return w->arrival > owned->arrival; });
  waiting_.insert(pos, std::move(owned));
}

// Makes `seq`'s block table cover `positions`; preempts younger sequences (then `seq` itself)
// until it does, taking back the rows a victim was given this step. False when `seq` was
// preempted.
bool Scheduler::Grow(Sequence* seq, int positions, StepPlan* plan, StepBudget* budget) {
  while (!cache_->Reserve(&seq->block_table, positions)) {
    // running_ is in arrival order: its tail is the youngest.
    Sequence* victim = running_.back().get();
    auto row = std::find_if(plan->rows.begin(), plan->rows.end(),
                            [&](const auto& r) { return r.first == victim; });
    if (row != plan->rows.end()) {
      budget->rows += row->second;
      if (victim->remaining() == 1) budget->decode_rows -= row->second;
      plan->rows.erase(row);
    }
    Preempt(victim, plan);
    if (victim == seq) return false;
  }
  return true;
}

void Scheduler::Admit(StepBudget* budget, StepPlan* plan) {
  std::set<uint64_t> adapters = RunningAdapters();
  int outstanding = 0;  // blocks the running sequences still need for their tokens so far
  for (const auto& r : running_) {
    outstanding += std::max(0, KvCache::BlocksFor(static_cast<int>(r->tokens.size()) + 1) -
                                   static_cast<int>(r->block_table.size()));
  }
  for (auto it = waiting_.begin(); it != waiting_.end() && budget->rows > 0;) {
    if (static_cast<int>(running_.size()) >= options_.max_num_seqs) break;
    Sequence* seq = it->get();
    const bool is_head = it == waiting_.begin();
    const bool new_adapter = seq->adapter_key != 0 && adapters.count(seq->adapter_key) == 0;
    if (new_adapter && options_.max_loras > 0 &&
        static_cast<int>(adapters.size()) >= options_.max_loras) {
      // Its adapter cannot join this step: later requests may pass it, for a while.
      if (is_head) {
        if (++seq->waited_steps > options_.max_head_wait_steps) break;
      }
      ++it;
      continue;
    }
    // Cached prefix blocks first (at least one token is left to compute: it gives the logits).
    int matched = 0;
    if (options_.enable_prefix_caching && seq->block_table.empty() && UsesPrefixCache(*seq)) {
      const size_t full = (seq->tokens.size() - 1) / kKvBlockSize;
      std::vector<uint64_t> keys;
      uint64_t previous = 0;
      for (size_t b = 0; b < full; ++b) {
        previous = BlockKey(*seq, b, previous);
        keys.push_back(previous);
      }
      matched = cache_->MatchPrefix(keys, seq->tokens.data(), &seq->block_table);
      keys.resize(static_cast<size_t>(matched));
      seq->block_keys = std::move(keys);
      seq->num_computed = matched * kKvBlockSize;
    }
    // Admit only when the whole (re)computation fits in the free blocks now, beside what the
    // running sequences still need for their tokens so far (a prompt admitted in chunks
    // reserves its blocks as it goes: without counting those, later admissions took them and
    // were preempted again when it grew), so a fresh admission is not preempted at once; first
    // come first served on blocks.
    const int need = KvCache::BlocksFor(static_cast<int>(seq->tokens.size()) + 1) - matched;
    if (need > cache_->num_free_blocks() - outstanding) {
      cache_->Release(&seq->block_table);
      seq->block_keys.clear();
      seq->num_computed = 0;
      break;
    }
    // New requests only, as vLLM's counters: a preempted sequence's readmission would count
    // its generated tokens and its own blocks as prompt hits.
    if (options_.enable_prefix_caching && UsesPrefixCache(*seq) && seq->num_preemptions == 0) {
      prefix_queries_ += static_cast<int64_t>(seq->tokens.size());
      prefix_hits_ += static_cast<int64_t>(matched) * kKvBlockSize;
      seq->result.num_cached_prompt_tokens = matched * kKvBlockSize;
    }
    const int count = ChunkRows(*seq, budget);
    // No rows (this step's prompt scoring is spent), or no blocks: it waits for the next step.
    if (count <= 0 || !cache_->Reserve(&seq->block_table, seq->num_computed + count)) {
      cache_->Release(&seq->block_table);
      seq->block_keys.clear();
      seq->num_computed = 0;
      break;
    }
    budget->rows -= count;
    outstanding += std::max(0, KvCache::BlocksFor(static_cast<int>(seq->tokens.size()) + 1) -
                                   static_cast<int>(seq->block_table.size()));
    plan->rows.emplace_back(seq, count);
    if (seq->adapter_key != 0) adapters.insert(seq->adapter_key);
    seq->waited_steps = 0;
    // running_ stays in arrival order (a request may pass a blocked head, a preempted one comes
    // back): its tail is the youngest, the one preemption takes.
    auto pos = std::find_if(running_.begin(), running_.end(),
                            [&](const auto& r) { return r->arrival > seq->arrival; });
    running_.insert(pos, std::move(*it));
    it = waiting_.erase(it);
  }
}

int Scheduler::PrefillCap(int decode_rows) const {
  int64_t backlog = 0;
  for (const auto& s : running_) {
    if (s->remaining() > 1) backlog += s->remaining();
  }
  // Waiting prompts count only as far as there are free sequence slots to admit them into:
  // a deep queue must not lift the cap for the prompts already running.
  size_t admissible = static_cast<size_t>(
      std::max<int64_t>(0, options_.max_num_seqs - static_cast<int64_t>(running_.size())));
  for (const auto& s : waiting_) {
    if (admissible-- == 0) break;
    backlog += s->remaining();
  }
  const int64_t steps = std::max(1, options_.prefill_drain_steps);
  const int64_t drain = (backlog + steps - 1) / steps;
  return static_cast<int>(std::min<int64_t>(
      options_.max_batch_tokens,
      std::max<int64_t>({options_.min_prefill_chunk, options_.rows_while_decoding - decode_rows, drain})));
}

StepPlan Scheduler::Schedule() {
  StepPlan plan;
  StepBudget budget;
  budget.rows = options_.max_batch_tokens;
  budget.scoring_rows = options_.max_prompt_logprob_rows;
  // Decode rows first, oldest first, then prefill chunks of running sequences.
  for (int pass = 0; pass < 2; ++pass) {
    if (pass == 1 && budget.decode_rows > 0 && options_.rows_while_decoding > 0) {
      // Rows are decoding: this step's prefill is capped so their next tokens come soon.
      budget.rows = std::min(budget.rows, PrefillCap(budget.decode_rows));
    }
    for (size_t i = 0; i < running_.size() && budget.rows > 0; ++i) {
      Sequence* s = running_[i].get();
      const bool decode = s->remaining() == 1;
      if (decode != (pass == 0)) continue;
      if (std::any_of(plan.rows.begin(), plan.rows.end(),
                      [&](const auto& r) { return r.first == s; })) {
        continue;
      }
      const int count = ChunkRows(*s, &budget);
      if (count <= 0) continue;
      if (!Grow(s, s->num_computed + count, &plan, &budget)) {
        // `s` itself was preempted, and everything younger: nothing after it runs.
        break;
      }
      // Only younger sequences (after position i) were preempted: `s` is still at i.
      budget.rows -= count;
      if (pass == 0) budget.decode_rows += count;
      plan.rows.emplace_back(s, count);
    }
  }
  // Sequences preempted this step are re-queued and must not be re-admitted at once.
  if (plan.preempted.empty()) Admit(&budget, &plan);
  return plan;
}

uint64_t Scheduler::BlockKey(const Sequence& seq, size_t index, uint64_t previous) const {
  // Keyed with the process's secret key: clients choose the tokens, and with a public hash
  // they could compute a block whose key is another prompt's and have their KV served to it
  // (review finding: 2^23 work against the earlier unkeyed hash; vLLM's CVE-2025-25183).
  // Longrope: blocks computed with the long factors are other blocks. A request's cache_salt
  // (vLLM's) is part of the first block's key, as vLLM's block hash takes it for the first
  // block only: every later key chains on it.
  const int switch_len = options_.rope_switch_length;
  const uint64_t head[4] = {
      previous, seq.adapter_key,
      uint64_t{switch_len > 0 && seq.tokens.size() > static_cast<size_t>(switch_len)},
      index == 0 ? seq.cache_salt_key : 0};
  SipHasher h(ProcessSipKey());
  h.Update(head, sizeof(head));
  h.Update(seq.tokens.data() + index * kKvBlockSize, sizeof(int32_t) * kKvBlockSize);
  return h.Final() | 1;  // never 0
}

void Scheduler::PublishBlocks(Sequence* seq) {
  if (!options_.enable_prefix_caching) return;
  const size_t full = static_cast<size_t>(seq->num_computed / kKvBlockSize);
  while (seq->block_keys.size() < full) {
    const size_t b = seq->block_keys.size();
    const uint64_t key = BlockKey(*seq, b, b == 0 ? 0 : seq->block_keys.back());
    cache_->Publish(seq->block_table[b], key, seq->tokens.data() + b * kKvBlockSize);
    seq->block_keys.push_back(key);
  }
}

void Scheduler::Recompute(Sequence* seq) {
  cache_->Release(&seq->block_table);
  seq->num_computed = 0;
  seq->num_cached_prompt = 0;
  seq->block_keys.clear();
}

std::unique_ptr<Sequence> Scheduler::Retire(Sequence* seq) {
  auto it = std::find_if(running_.begin(), running_.end(),
                         [&](const auto& s) { return s.get() == seq; });
  std::unique_ptr<Sequence> owned = std::move(*it);
  running_.erase(it);
  cache_->Release(&owned->block_table);
  return owned;
}

std::unique_ptr<Sequence> Scheduler::Remove(int64_t id) {
  for (auto it = running_.begin(); it != running_.end(); ++it) {
    if ((*it)->id == id) return Retire(it->get());
  }
  for (auto it = waiting_.begin(); it != waiting_.end(); ++it) {
    if ((*it)->id == id) {
      std::unique_ptr<Sequence> owned = std::move(*it);
      waiting_.erase(it);
      cache_->Release(&owned->block_table);
      return owned;
    }
  }
  return nullptr;
}

}  // namespace loom
