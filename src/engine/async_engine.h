// AsyncEngine: the engine on its own thread, with a thread-safe submit/abort queue and a stats snapshot.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "engine/engine.h"

namespace loom {

// What /metrics and /health read; refreshed by the engine thread after every step.
struct EngineStats {
  int num_running = 0;
  int num_waiting = 0;
  double kv_cache_usage = 0;  // fraction of KV blocks in use, 0..1
  int64_t num_preemptions = 0;
  int64_t steps = 0;
  StepCounts step_counts;      // steps by token rows, sequences and distinct adapters
  int64_t prefix_queries = 0;  // prompt tokens looked up in the prefix cache
  int64_t prefix_hits = 0;     // of those, found
  std::vector<std::string> running_adapters;  // adapter names, deduplicated, sorted
  std::vector<std::string> waiting_adapters;
  double updated_unix_s = 0;  // when this snapshot was taken
};

// Thread-safety: Submit, Abort, Stats, Drain and Stop may be called from any thread. The
// callback runs on the engine thread: it must be quick and must not call back into the engine
// (push to a queue and return). It is called for every update of the sequence, the last one
// having finish_reason != kNone; after that it is never called again.
class AsyncEngine {
 public:
  using Callback = std::function<void(SequenceUpdate&&)>;

  AsyncEngine(Model* model, const EngineOptions& options, const tokenizer::Tokenizer* tokenizer);
  ~AsyncEngine();  // Stop()

  // Validates (on the calling thread) and queues; returns the sequence id.
  StatusOr<int64_t> Submit(GenerationRequest request, Callback callback);
  // Cancels a queued or running sequence (its callback gets a kAbort update). No-op if done.
  void Abort(int64_t id);
  EngineStats Stats() const;
  // Sequences submitted and not yet finished.
  int num_in_flight() const { return in_flight_.load(); }
  // Aborts every sequence, then stops the thread.
  void Stop();
  int max_model_len() const { return engine_.max_model_len(); }
  const Engine& engine() const { return engine_; }  // Validate and fixed properties only

 private:
  void Loop();
  // One pass of Loop with the lock released: adds the new requests, aborts, steps the engine,
  // delivers the updates. `*stalled` when there was work but nothing could be scheduled.
  void Round(std::vector<std::pair<GenerationRequest, int64_t>>& inbox,
             const std::vector<int64_t>& aborts, bool stopping, bool* stalled);
  // Publishes the stats, hands each update to its callback, then the finished-sequences hook
  // (also when `finished`: a request failed before it was added).
  void Deliver(bool finished);
  // After a round threw: aborts and tells every sequence in flight, known to the engine or not.
  void Recover();
  void AbortAll();  // every sequence in flight (engine thread)
  void Publish();   // never throws (the adapter lists are left empty when they cannot be built)
  // A request that could not be added (an allocation failed): its client gets an error update.
  void FailUnadded(int64_t id, const char* what);  // never throws

  Engine engine_;
  std::function<void()> on_sequences_finished_;  // EngineOptions', engine thread only
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::vector<std::pair<GenerationRequest, int64_t>> inbox_;
  std::vector<int64_t> aborts_;
  std::unordered_map<int64_t, Callback> callbacks_;  // engine thread only after hand-over
  std::vector<std::pair<int64_t, Callback>> new_callbacks_;
  std::atomic<int64_t> next_id_{0};
  std::atomic<int> in_flight_{0};
  EngineStats stats_;
  std::thread thread_;
};

}  // namespace loom
