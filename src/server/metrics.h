// Metrics: vLLM-named Prometheus counters, gauges and histograms, rendered as text for /metrics.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "engine/async_engine.h"

namespace loom::server {

// A Prometheus histogram with fixed bucket bounds. Thread-safety: Observe and Render from any
// thread (one mutex; an observation is a few adds).
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void Observe(double v);
  // "# TYPE" line and the _bucket/_sum/_count samples.
  void Render(const std::string& name, const std::string& help, const std::string& labels,
              std::string* out) const;

 private:
  std::vector<double> bounds_;
  mutable std::mutex mu_;
  std::vector<uint64_t> counts_;  // per bucket (not cumulative); last = +Inf
  double sum_ = 0;
};

// Everything /metrics shows that the HTTP layer counts; engine and adapter gauges are read
// at render time. Thread-safety: any thread.
struct Metrics {
  Metrics();
  std::atomic<int64_t> prompt_tokens{0};
  std::atomic<int64_t> generation_tokens{0};
  std::atomic<int64_t> success_stop{0};
  std::atomic<int64_t> success_length{0};
  std::atomic<int64_t> success_abort{0};
  std::atomic<int64_t> success_error{0};  // vLLM's finished_reason "error"
  Histogram ttft;
  Histogram itl;
  Histogram e2e;
};

struct MetricsSnapshot {
  EngineStats engine;
  int max_lora = 0;
  int64_t adapter_loads = 0;
  int64_t adapter_evictions = 0;
  int adapters_resident = 0;
  int large_prompts_tokenizing = 0;  // EncodeGate: 0 or 1
  int large_prompts_waiting = 0;
  int64_t large_prompts_abandoned = 0;
};

// Prometheus text exposition (version 0.0.4); every series carries model_name.
std::string RenderMetrics(const Metrics& m, const MetricsSnapshot& s, const std::string& model_name);

}  // namespace loom::server
