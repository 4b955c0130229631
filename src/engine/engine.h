// Engine: continuous batching loop — schedule rows of many sequences, forward, sample, finish.
#pragma once

#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/sampler.h"
#include "model/batch.h"
#include "model/kv_cache.h"
#include "lora/adapter.h"
#include "model/model.h"

namespace loom {

struct EngineOptions {
  int kv_cache_tokens = 16384;  // positions the KV cache holds, all sequences together
  int max_batch_tokens = 512;   // rows per step (prefill is chunked to fit)
  int max_num_seqs = 64;        // sequences running at once
  int max_model_len = 0;        // 0 = the model's max_position_embeddings
};

struct GenerationRequest {
  std::vector<int32_t> prompt;
  int adapter_slot = -1;  // Engine::AddAdapter's slot; -1 = base model
  SamplingParams params;
  bool return_prompt_logits = false;  // keep the logits of every prompt position (tests)
  bool return_step_logits = false;    // keep the logits of every generated step (tests)
};

enum class FinishReason { kNone, kStop, kLength };
const char* FinishReasonName(FinishReason r);  // "stop" | "length"

struct GenerationResult {
  int64_t id = 0;
  std::vector<int32_t> prompt;
  std::vector<int32_t> generated;
  FinishReason finish_reason = FinishReason::kNone;
  std::vector<TokenLogprob> logprobs;                  // [generated] chosen token
  std::vector<std::vector<TokenLogprob>> top_logprobs;  // [generated][N]
  std::vector<float> prompt_logits;  // [prompt_len, vocab] when requested
  std::vector<float> step_logits;    // [generated, vocab] when requested
};

// Thread-safety: single-threaded; the server's engine thread owns it.
class Engine {
 public:
  Engine(Model* model, const EngineOptions& options);

  // Makes an adapter available to requests; returns its slot. The engine keeps it alive.
  int AddAdapter(std::shared_ptr<const Adapter> adapter);

  // Validates and queues a request; returns its id.
  StatusOr<int64_t> Add(GenerationRequest request);
  // Runs one step (one Forward). Returns false when there was nothing to run.
  bool Step();
  bool HasWork() const { return !waiting_.empty() || !running_.empty(); }
  // Finished results, in completion order; moves them out.
  std::vector<GenerationResult> TakeFinished();
  // Runs until every queued request finished.
  std::vector<GenerationResult> RunToCompletion();

  int max_model_len() const { return max_model_len_; }
  const KvCache& kv_cache() const { return *cache_; }
  int64_t steps() const { return steps_; }

 private:
  struct Sequence {
    GenerationRequest request;
    GenerationResult result;
    std::unique_ptr<Sampler> sampler;
    std::vector<int32_t> tokens;       // prompt then generated
    std::vector<int32_t> block_table;  // KV blocks
    int num_computed = 0;              // positions whose K/V are in the cache
  };
  bool Admit();
  void Finish(Sequence& seq, FinishReason reason);

  Model* model_;
  EngineOptions options_;
  int max_model_len_;
  std::unique_ptr<KvCache> cache_;
  int64_t next_id_ = 0;
  int64_t steps_ = 0;
  std::deque<std::unique_ptr<Sequence>> waiting_;
  std::vector<std::unique_ptr<Sequence>> running_;
  std::vector<GenerationResult> finished_;
  Batch batch_;
  std::vector<std::shared_ptr<const Adapter>> adapter_owners_;
  std::vector<const Adapter*> adapters_;  // slot → adapter
  std::vector<float> logits_;
  struct RowOwner {
    Sequence* seq;
    bool samples;  // last row of the prompt or a decode row: a token comes from it
    int prompt_index;  // ≥ 0: a prompt position whose logits the request keeps
  };
  std::vector<RowOwner> logit_owners_;
};

}  // namespace loom
