// Sequence: one generation in flight — its tokens, KV blocks, sampler, adapter lease and text state.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/request.h"
#include "engine/sampler.h"
#include "engine/stop_checker.h"
#include "tokenizer/detokenizer.h"

namespace loom {

// Thread-safety: owned by the engine thread (Engine / Scheduler) only.
struct Sequence {
  int64_t id = 0;
  int64_t arrival = 0;  // admission order: first come, first served; youngest preempted first
  GenerationRequest request;
  GenerationResult result;
  uint64_t adapter_key = 0;  // the adapter's cache_identity(); 0 = base model
  uint64_t cache_salt_key = 0;  // keyed hash of request.cache_salt; 0 = no salt
  int adapter_slot = -1;     // index into this step's adapter list (set by the engine)
  std::unique_ptr<Sampler> sampler;
  std::vector<int32_t> tokens;       // prompt then generated
  std::vector<int32_t> block_table;  // KV blocks covering positions [0, num_computed)
  int num_computed = 0;              // positions whose K/V are in the cache
  int num_cached_prompt = 0;         // leading positions served from the prefix cache
  std::vector<uint64_t> block_keys;  // prefix-cache keys of the full blocks computed so far
  int num_preemptions = 0;
  int waited_steps = 0;  // steps spent at the head of the queue without admission
  std::unique_ptr<tokenizer::StreamingDetokenizer> detokenizer;  // when text is wanted
  StopChecker stop;
  std::string prompt_logprobs_error;  // a prompt row's logits were not finite: fails the sequence
  bool prompt_logprobs_sent = false;  // in an update already

  int remaining() const { return static_cast<int>(tokens.size()) - num_computed; }
};

}  // namespace loom
