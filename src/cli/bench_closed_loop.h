// `loom bench --closed-loop C`: the serving workload (C clients, one request in flight each) on the engine alone.
#pragma once

#include <memory>
#include <vector>

#include "base/status.h"
#include "engine/engine.h"
#include "lora/adapter.h"
#include "model/model.h"

namespace loom::cli {

struct ClosedLoopArgs {
  int clients = 0;             // --closed-loop
  int requests = 16;           // --requests
  int prompt_len = 128;
  int gen_tokens = 64;
  int max_num_seqs = 32;       // as tools/bench/serve/run_loom.py starts loom serve
  int max_batch_tokens = 512;  // loom serve's --max-num-batched-tokens default
  double target_step_ms = kServeTargetStepMs;  // as loom serve
  uint32_t seed = 0;
  bool json = false;
};

// The p-th percentile of v (linear between neighbours; 50 = the median).
double Percentile(std::vector<double> v, double p);

Status ValidateClosedLoopArgs(const Model& model, const ClosedLoopArgs& a);
int RunClosedLoopBench(Model* model, const ClosedLoopArgs& a,
                       const std::vector<std::shared_ptr<const Adapter>>& adapters);

}  // namespace loom::cli
