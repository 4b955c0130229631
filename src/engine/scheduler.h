// Scheduler: which rows of which sequences run in the next step — admission, chunking, preemption.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <set>
#include <utility>
#include <vector>

#include "engine/sequence.h"
#include "model/kv_cache.h"

namespace loom {

struct SchedulerOptions {
  int max_batch_tokens = 512;  // rows per step (prefill is chunked to fit)
  int max_num_seqs = 64;       // sequences running at once
  int max_loras = 0;           // distinct adapters among running sequences; 0 = no limit
  // A waiting request at the head of the queue that cannot join (its adapter would exceed
  // max_loras) lets later requests pass for at most this many steps; then admission stops
  // until it fits, so no request starves.
  int max_head_wait_steps = 32;
  bool enable_prefix_caching = true;
  // Prompt-scoring rows per step, all sequences together (prompt_logprobs): each needs a
  // logits row of the whole vocabulary. The engine sets it from the vocabulary's size.
  int max_prompt_logprob_rows = 1 << 30;
  // While any running sequence decodes, a step's prefill rows (chunks and admissions) are at
  // most max(min_prefill_chunk, rows_while_decoding - decode rows, backlog / prefill_drain_steps)
  // where backlog = tokens not yet computed of the running sequences that prefill and of as
  // many waiting ones as there are free sequence slots, never above max_batch_tokens: a prompt
  // then delays every stream's next token by one short step, not by a max_batch_tokens step,
  // while a backlog of prompts (a burst, a saturated server) still drains within a few steps
  // instead of queueing behind the decoding rows. 0 = no such limit. The engine sets it from
  // measured step times (EngineOptions::target_step_ms).
  int rows_while_decoding = 0;
  int min_prefill_chunk = 32;    // prefill always progresses by at least this many rows a step
  int prefill_drain_steps = 4;
  // Longrope models (Model::rope_switch_length): K/V computed while a sequence has at most this
  // many tokens differ from those computed beyond, so prefix-cache keys carry the side. 0 = none.
  int rope_switch_length = 0;
};

// One step's plan: (sequence, number of rows) in scheduling order.
struct StepPlan {
  std::vector<std::pair<Sequence*, int>> rows;
  std::vector<Sequence*> preempted;  // sent back to the queue this step (blocks released)
};

// Policy: decode rows first (one each, so running sequences never starve behind prompts),
// then prefill chunks of running sequences, then admission of waiting ones, first come first
// served, under the row budget (smaller while rows decode: rows_while_decoding), max_num_seqs,
// max_loras and free KV blocks. Blocks are
// reserved as positions are computed; when they run out the youngest running sequence is
// preempted (its blocks freed; it recomputes its tokens when readmitted) — also one already
// given rows this step (they are taken back, as vLLM's scheduler does), so the oldest
// sequences always progress: an old prompt still prefilling is not preempted in favour of
// younger decoding ones (it was, and a scoring prompt, chunked small, could starve).
// Thread-safety: engine thread only.
class Scheduler {
 public:
  Scheduler(KvCache* cache, const SchedulerOptions& options);

  void Enqueue(std::unique_ptr<Sequence> seq);
  StepPlan Schedule();
  // Removes a finished sequence from the running set and frees its blocks.
  std::unique_ptr<Sequence> Retire(Sequence* seq);
  // Removes a sequence wherever it is (abort); null when unknown.
  std::unique_ptr<Sequence> Remove(int64_t id);
  // After a step: indexes the sequence's newly completed full blocks in the prefix cache.
  void PublishBlocks(Sequence* seq);
  // Drops a running sequence's K/V (blocks released) so its next steps recompute every token:
  // for a longrope sequence that has just crossed rope_switch_length.
  void Recompute(Sequence* seq);

  int64_t prefix_queries() const { return prefix_queries_; }  // prompt tokens looked up
  int64_t prefix_hits() const { return prefix_hits_; }        // of those, found cached

  bool HasWork() const { return !waiting_.empty() || !running_.empty(); }
  const std::vector<std::unique_ptr<Sequence>>& running() const { return running_; }
  const std::deque<std::unique_ptr<Sequence>>& waiting() const { return waiting_; }
  int64_t num_preemptions() const { return num_preemptions_; }
  void set_rows_while_decoding(int rows) { options_.rows_while_decoding = rows; }
  int rows_while_decoding() const { return options_.rows_while_decoding; }

 private:
  // What is left of a step while it is planned.
  struct StepBudget {
    int rows = 0;          // rows of any kind
    int decode_rows = 0;   // rows given to decoding sequences so far
    int scoring_rows = 0;  // prompt-scoring rows left (max_prompt_logprob_rows)
  };
  bool Grow(Sequence* seq, int positions, StepPlan* plan, StepBudget* budget);
  void Preempt(Sequence* victim, StepPlan* plan);
  static bool UsesPrefixCache(const Sequence& seq);
  // The rows `seq` may compute this step, the budget allowing; takes its scoring rows from it.
  int ChunkRows(const Sequence& seq, StepBudget* budget) const;
  void Admit(StepBudget* budget, StepPlan* plan);
  std::set<uint64_t> RunningAdapters() const;
  // Prefill rows allowed in a step that decodes `decode_rows` rows (rows_while_decoding).
  int PrefillCap(int decode_rows) const;
  // Key of full block `index` of `seq` given the previous block's key (0 for the first).
  uint64_t BlockKey(const Sequence& seq, size_t index, uint64_t previous) const;

  KvCache* cache_;
  SchedulerOptions options_;
  int64_t next_arrival_ = 0;
  int64_t num_preemptions_ = 0;
  int64_t prefix_queries_ = 0;
  int64_t prefix_hits_ = 0;
  std::deque<std::unique_ptr<Sequence>> waiting_;   // ordered by arrival
  std::vector<std::unique_ptr<Sequence>> running_;  // ordered by arrival
};

}  // namespace loom
