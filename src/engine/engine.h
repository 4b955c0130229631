// Engine: continuous batching loop — schedule rows of many sequences, forward, sample, stream, finish.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/request.h"
#include "engine/sampler.h"
#include "engine/scheduler.h"
#include "engine/sequence.h"
#include "engine/step_counts.h"
#include "lora/adapter.h"
#include "model/batch.h"
#include "model/kv_cache.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace loom {

struct EngineOptions {
  int kv_cache_tokens = 16384;  // positions the KV cache holds, all sequences together
  KvDtype kv_cache_dtype = KvDtype::kF32;  // --kv-cache-dtype
  int max_batch_tokens = 512;   // rows per step (prefill is chunked to fit)
  int max_num_seqs = 64;        // sequences running at once
  int max_model_len = 0;        // 0 = the model's max_position_embeddings
  int max_loras = 0;            // distinct adapters in one step; 0 = no limit
  bool enable_prefix_caching = true;
  // While sequences decode, prefill chunks are sized so a step takes about this long, from the
  // measured time per row (Scheduler rows_while_decoding): what limits the inter-token latency
  // a new prompt causes, unless a backlog of prompts needs more (Scheduler::PrefillCap).
  // Chunk sizes then depend on timing: outputs do not under batch-invariant kernels (the
  // server's default); with --no-batch-invariant they already depended on arrivals. 0 = chunk
  // by max_batch_tokens alone.
  double target_step_ms = 0;
  // Called on the engine thread (AsyncEngine) after sequences finished and their adapter leases
  // were released, e.g. AdapterStore::Trim: a store over --max-cpu-loras because every adapter
  // was leased gets back under it without waiting for the next request. May be empty.
  std::function<void()> on_sequences_finished;
};

// loom serve's (and `loom bench --closed-loop`'s) default target_step_ms; docs/PERFORMANCE.md.
inline constexpr double kServeTargetStepMs = 400;
// A target_step_ms value from a flag: [0, 3600000], not NaN; the message names `flag`.
Status ValidateTargetStepMs(double ms, const std::string& flag);

// Thread-safety: single-threaded (the engine thread owns it), except Validate, which only
// reads what is fixed at construction and may run on any thread.
class Engine {
 public:
  // `tokenizer` (may be null) is needed for requests with stop strings or detokenize.
  Engine(Model* model, const EngineOptions& options,
         const tokenizer::Tokenizer* tokenizer = nullptr);

  // Makes an adapter available to requests by slot (GenerationRequest.adapter_slot); the
  // engine keeps it alive. Requests may instead carry their adapter (GenerationRequest.adapter).
  int AddAdapter(std::shared_ptr<const Adapter> adapter);

  // Checks a request against the model and the limits; the message names the field.
  Status Validate(const GenerationRequest& request) const;
  // Validates and queues a request; returns its id (ids count up from 0).
  StatusOr<int64_t> Add(GenerationRequest request);
  // Queues an already validated request under a caller-chosen id.
  void AddValidated(GenerationRequest request, int64_t id);
  // Stops a sequence wherever it is; its blocks are freed and an update with kAbort is
  // emitted. False when the id is unknown (already finished).
  bool Abort(int64_t id);

  // Runs one step (one Forward). Returns false when there was nothing to run.
  bool Step();
  bool HasWork() const { return scheduler_.HasWork(); }
  // Per-step updates (tokens, text, ends) since the last call, in order.
  std::vector<SequenceUpdate> TakeUpdates();
  // Finished results, in completion order; moves them out.
  std::vector<GenerationResult> TakeFinished();
  // Runs until every queued request finished.
  std::vector<GenerationResult> RunToCompletion();

  int max_model_len() const { return max_model_len_; }
  int max_num_seqs() const { return options_.max_num_seqs; }
  const KvCache& kv_cache() const { return *cache_; }
  const Scheduler& scheduler() const { return scheduler_; }
  const Model& model() const { return *model_; }
  int64_t steps() const { return steps_; }
  // Steps by their token rows, sequences and distinct adapters.
  const StepCounts& step_counts() const { return step_counts_; }
  // Measured milliseconds per row of a step (moving average over steps of ≥ 16 rows); 0 until
  // one ran. Only kept when target_step_ms is set.
  double ms_per_row() const { return ms_per_row_; }
  // Keep per-step updates (the server does); the CLI only reads finished results. With updates,
  // each token's log-probs go out with its update and the results keep none.
  void set_emit_updates(bool on) { emit_updates_ = on; }

 private:
  const Adapter* AdapterOf(const Sequence& seq) const;
  static bool PastMinTokens(const Sequence& seq);
  static FinishReason StoppedByString(Sequence* seq, const std::string& matched,
                                      SequenceUpdate* update);
  void Finish(Sequence* seq, FinishReason reason, SequenceUpdate* update);
  // A sampled row: the token (or why none), its log-prob and the top list.
  struct Drawn {
    StatusOr<int32_t> token = -1;
    TokenLogprob chosen{};
    std::vector<TokenLogprob> top;
  };
  // The sampler on a row: touches only seq's sampler and result.step_logits, so rows of
  // different sequences run in parallel.
  Drawn DrawRow(Sequence* seq, float* row);
  // The rest, in row order on the engine thread: accept the token, detokenize, stop, finish.
  void ApplyDrawn(Sequence* seq, Drawn drawn);
  // From the time since `start` of a step of `rows` rows: the scheduler's rows_while_decoding.
  void UpdateStepBudget(std::chrono::steady_clock::time_point start, int rows);

  Model* model_;
  EngineOptions options_;
  const tokenizer::Tokenizer* tokenizer_;
  // The tokenizer's own EOS id (-1 when unknown): vLLM's EOS proper; the model's other EOS ids
  // (config.json / generation_config.json) stop as stop token ids, reported in stop_reason.
  int32_t primary_eos_ = -1;
  int max_model_len_;
  std::unique_ptr<KvCache> cache_;
  Scheduler scheduler_;
  int64_t next_id_ = 0;
  int64_t steps_ = 0;
  StepCounts step_counts_;
  double ms_per_row_ = 0;
  bool emit_updates_ = false;
  std::vector<GenerationResult> finished_;
  std::vector<SequenceUpdate> updates_;
  Batch batch_;
  std::vector<std::shared_ptr<const Adapter>> registered_;  // AddAdapter slots
  std::vector<const Adapter*> step_adapters_;               // this step's slot → adapter
  std::vector<float> logits_;
  struct RowOwner {
    Sequence* seq;
    bool samples;      // last row of the prompt or a decode row: a token comes from it
    int prompt_index;  // ≥ 0: a prompt position whose logits the request keeps
    bool prompt_logprob = false;  // the row gives the log-prob of the next prompt token
  };
  // Prompt log-probs of this step's rows, computed over the pool, appended in position order.
  void ComputePromptLogprobs();
  std::vector<RowOwner> logit_owners_;
  std::vector<size_t> sample_rows_;  // indices into logit_owners_ that sample this step
  std::vector<Drawn> drawn_;         // their results
};

}  // namespace loom
