// AsyncEngine: engine thread loop — take submissions and aborts, step, deliver updates.
#include "engine/async_engine.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <exception>
#include <set>
#include <string>

namespace loom {

namespace {

// The exception being handled, in words (call inside a catch block only; the text lives as long
// as the exception, and building none keeps an out-of-memory handler from throwing again).
const char* CurrentExceptionText() {
  try {
    throw;
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "an exception of no standard type";
  }
}

// The last update of a sequence that never started (its error text dropped if even that cannot
// be built); never throws.
void TellNotStarted(int64_t id, const AsyncEngine::Callback& callback, const char* what) {
  SequenceUpdate u;
  u.id = id;
  u.finish_reason = FinishReason::kError;
  try {
    u.error = std::string("could not start the sequence: ") + what;
  } catch (...) {
  }
  try {
    if (callback) callback(std::move(u));
  } catch (...) {
    std::fprintf(stderr, "loom: sequence %lld: delivering its failure failed: %s\n",
                 static_cast<long long>(id), CurrentExceptionText());
  }
}

}  // namespace

AsyncEngine::AsyncEngine(Model* model, const EngineOptions& options,
                         const tokenizer::Tokenizer* tokenizer)
    : engine_(model, options, tokenizer), on_sequences_finished_(options.on_sequences_finished) {
  engine_.set_emit_updates(true);
  thread_ = std::thread([this] { Loop(); });
}

AsyncEngine::~AsyncEngine() { Stop(); }

StatusOr<int64_t> AsyncEngine::Submit(GenerationRequest request, Callback callback) {
  RETURN_IF_ERROR(engine_.Validate(request));
  const int64_t id = next_id_.fetch_add(1);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_) return Unavailable("the engine is shutting down");
    new_callbacks_.emplace_back(id, std::move(callback));
    try {  // never a request without its callback
      inbox_.emplace_back(std::move(request), id);
    } catch (...) {
      new_callbacks_.pop_back();
      throw;
    }
    ++in_flight_;
  }
  cv_.notify_one();
  return id;
}

void AsyncEngine::Abort(int64_t id) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    aborts_.push_back(id);
  }
  cv_.notify_one();
}

EngineStats AsyncEngine::Stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void AsyncEngine::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_ && !thread_.joinable()) return;
    stop_ = true;
  }
  cv_.notify_one();
  if (thread_.joinable()) thread_.join();
}

void AsyncEngine::Publish() {
  EngineStats s;
  const Scheduler& sched = engine_.scheduler();
  s.num_running = static_cast<int>(sched.running().size());
  s.num_waiting = static_cast<int>(sched.waiting().size());
  const KvCache& kv = engine_.kv_cache();
  s.kv_cache_usage =
      kv.num_blocks() == 0 ? 0 : 1.0 - static_cast<double>(kv.num_free_blocks()) / kv.num_blocks();
  s.num_preemptions = sched.num_preemptions();
  s.steps = engine_.steps();
  s.step_counts = engine_.step_counts();
  s.prefix_queries = sched.prefix_queries();
  s.prefix_hits = sched.prefix_hits();
  // The adapter names are the only part that allocates: if that fails, the counts are
  // published without them rather than not at all (a throw here left every gauge as it was
  // before the step, and failed the round's updates with it).
  try {
    std::set<std::string> running, waiting;
    for (const auto& q : sched.running()) {
      if (q->request.adapter) running.insert(q->request.adapter->name());
    }
    for (const auto& q : sched.waiting()) {
      if (q->request.adapter) waiting.insert(q->request.adapter->name());
    }
    s.running_adapters.assign(running.begin(), running.end());
    s.waiting_adapters.assign(waiting.begin(), waiting.end());
  } catch (...) {
    std::fprintf(stderr, "loom: metrics: listing the adapters in use failed (%s)\n",
                 CurrentExceptionText());
    s.running_adapters.clear();
    s.waiting_adapters.clear();
  }
  s.updated_unix_s =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  std::lock_guard<std::mutex> lock(mu_);
  stats_ = std::move(s);  // moves: no allocation
}

void AsyncEngine::AbortAll() {
  std::vector<int64_t> ids;
  for (const auto& [id, cb] : callbacks_) ids.push_back(id);
  for (int64_t id : ids) engine_.Abort(id);
}

void AsyncEngine::FailUnadded(int64_t id, const char* what) {
  auto it = callbacks_.find(id);
  if (it == callbacks_.end()) return;
  TellNotStarted(id, it->second, what);
  callbacks_.erase(it);
  --in_flight_;
}

void AsyncEngine::Loop() {
  bool stopping = false;
  bool stalled = false;  // work exists but none could be scheduled: wait for a change
  while (true) {
    std::vector<std::pair<GenerationRequest, int64_t>> inbox;
    std::vector<int64_t> aborts;
    std::vector<std::pair<int64_t, Callback>> unmerged;
    {
      std::unique_lock<std::mutex> lock(mu_);
      auto ready = [&] {
        return stop_ || !inbox_.empty() || !aborts_.empty() || (engine_.HasWork() && !stalled);
      };
      if (stalled) {
        cv_.wait_for(lock, std::chrono::milliseconds(2), ready);
      } else {
        cv_.wait(lock, ready);
      }
      inbox.swap(inbox_);
      aborts.swap(aborts_);
      // A map node each: an allocation that fails leaves the rest here, failed below (their
      // requests would run with nobody to tell).
      try {
        // Buckets first: an emplace that grows them destroys the node (and the callback moved
        // into it) when growing fails; the node's own allocation fails before the move.
        callbacks_.reserve(callbacks_.size() + new_callbacks_.size());
        for (auto& [id, cb] : new_callbacks_) callbacks_.emplace(id, std::move(cb));
        new_callbacks_.clear();
      } catch (...) {
        unmerged.swap(new_callbacks_);
      }
      stopping = stop_;
    }
    for (auto& [id, cb] : unmerged) {
      if (callbacks_.count(id) != 0) continue;  // merged before the failure
      std::erase_if(inbox, [id = id](const auto& entry) { return entry.second == id; });
      TellNotStarted(id, cb, "out of memory");
      --in_flight_;
    }
    unmerged.clear();
    // Whatever throws in a round (an allocation that fails in Abort, Publish, TakeUpdates or
    // the bookkeeping around them, or a non-std exception) aborts what is in flight and the loop
    // goes on: escaping this thread's function would end the process through std::terminate.
    try {
      Round(inbox, aborts, stopping, &stalled);
    } catch (...) {
      std::fprintf(stderr, "loom: engine round failed (%s); aborting all %zu sequence(s)\n",
                   CurrentExceptionText(), callbacks_.size());
      Recover();
      stalled = false;
    }
    if (stopping) return;
  }
}

void AsyncEngine::Round(std::vector<std::pair<GenerationRequest, int64_t>>& inbox,
                        const std::vector<int64_t>& aborts, bool stopping, bool* stalled) {
  bool failed_to_add = false;  // such a request's adapter lease went: the store may trim
  for (auto& [request, id] : inbox) {
    // Adding copies the prompt and builds the sampler and detokenizer: an allocation that
    // fails here fails this request alone (it would end the process through std::terminate).
    try {
      engine_.AddValidated(std::move(request), id);
    } catch (...) {
      FailUnadded(id, CurrentExceptionText());
      failed_to_add = true;
    }
  }
  for (int64_t id : aborts) engine_.Abort(id);
  if (stopping) AbortAll();
  *stalled = false;
  if (!stopping && engine_.HasWork()) {
    // An exception here (an allocation that failed mid-step, on this thread or in a pool
    // task: ThreadPool::ParallelFor rethrows it here once its workers are done) would end the
    // process through std::terminate. The step's sequences may be half-advanced: every
    // sequence in flight is aborted (its blocks freed, its client told), and the engine goes
    // on with new requests.
    try {
      *stalled = !engine_.Step();
    } catch (...) {
      std::fprintf(stderr, "loom: engine step failed (%s); aborting all %zu sequence(s)\n",
                   CurrentExceptionText(), callbacks_.size());
      AbortAll();
    }
  }
  Deliver(failed_to_add);
}

void AsyncEngine::Deliver(bool finished) {
  // The snapshot first: a client woken by its last update then reads /metrics with its
  // sequence's last step counted.
  Publish();
  for (SequenceUpdate& u : engine_.TakeUpdates()) {
    auto it = callbacks_.find(u.id);
    if (it == callbacks_.end()) continue;
    const bool last = u.finish_reason != FinishReason::kNone;
    finished = finished || last;
    try {
      it->second(std::move(u));
    } catch (...) {  // one client's callback must not end the others
      std::fprintf(stderr, "loom: sequence %lld: delivering an update failed: %s\n",
                   static_cast<long long>(it->first), CurrentExceptionText());
    }
    if (last) {
      callbacks_.erase(it);
      --in_flight_;
    }
  }
  engine_.TakeFinished();  // results are delivered through updates
  if (finished && on_sequences_finished_) {
    try {
      on_sequences_finished_();
    } catch (...) {
      std::fprintf(stderr, "loom: after finished sequences: %s\n", CurrentExceptionText());
    }
  }
}

void AsyncEngine::Recover() {
  // Every sequence the engine knows gets its abort update as in any round; then those it no
  // longer knows (a request whose adding threw, an update lost with its exception) are told
  // here, so no client waits for a sequence that will never run.
  try {
    AbortAll();
    Deliver(/*finished=*/true);
  } catch (...) {
    std::fprintf(stderr, "loom: aborting after a failed round failed too (%s)\n",
                 CurrentExceptionText());
  }
  while (!callbacks_.empty()) FailUnadded(callbacks_.begin()->first, "the engine round failed");
}

}  // namespace loom
