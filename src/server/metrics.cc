// Prometheus text rendering with vLLM's metric names, labels and histogram buckets.
#include "server/metrics.h"

#include <cstdio>
#include <cstdlib>

namespace loom::server {

namespace {
std::string Num(double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.17g", v);
  return buf;
}
// As Python's repr (what vLLM's prometheus_client writes for `le`): the shortest decimal that
// reads back as the same double, with ".0" on integral values ("0.005", "1.0", "2560.0").
std::string BucketLabel(double v) {
  char buf[64];
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof(buf), "%.*g", precision, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  std::string out = buf;
  if (out.find_first_of(".eEn") == std::string::npos) out += ".0";
  return out;
}
// Label values escape \, " and newline (Prometheus text format).
std::string Escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '\\' || c == '"') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}
std::string Join(const std::vector<std::string>& v) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) out += (i ? "," : "") + v[i];
  return out;
}
void Family(std::string* out, const std::string& name, const std::string& type,
            const std::string& help) {
  *out += "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
}
}  // namespace

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::Observe(double v) {
  size_t i = 0;
  while (i < bounds_.size() && v > bounds_[i]) ++i;
  std::lock_guard<std::mutex> lock(mu_);
  ++counts_[i];
  sum_ += v;
}

namespace {
// "# TYPE" line and the _bucket/_sum/_count samples; counts: per bucket (not cumulative),
// num_bounds + 1 of them (the last: +Inf).
template <typename Count>
void RenderHistogram(const std::string& name, const std::string& help, const std::string& labels,
                     const double* bounds, size_t num_bounds, const Count* counts, double sum,
                     std::string* out) {
  Family(out, name, "histogram", help);
  uint64_t cumulative = 0;
  for (size_t i = 0; i <= num_bounds; ++i) {
    cumulative += static_cast<uint64_t>(counts[i]);
    const std::string le = i < num_bounds ? BucketLabel(bounds[i]) : "+Inf";
    *out += name + "_bucket{" + labels + ",le=\"" + le + "\"} " + std::to_string(cumulative) + "\n";
  }
  *out += name + "_sum{" + labels + "} " + Num(sum) + "\n";
  *out += name + "_count{" + labels + "} " + std::to_string(cumulative) + "\n";
}
}  // namespace

void Histogram::Render(const std::string& name, const std::string& help, const std::string& labels,
                       std::string* out) const {
  std::lock_guard<std::mutex> lock(mu_);
  RenderHistogram(name, help, labels, bounds_.data(), bounds_.size(), counts_.data(), sum_, out);
}

// Buckets as vLLM's v1 PrometheusStatLogger.
Metrics::Metrics()
    : ttft({0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
            10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0}),
      itl({0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
           20.0, 40.0, 80.0}),
      e2e({0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0,
           240.0, 480.0, 960.0, 1920.0, 7680.0}) {}

std::string RenderMetrics(const Metrics& m, const MetricsSnapshot& s, const std::string& model_name) {
  std::string out;
  out.reserve(8192);
  const std::string ml = "model_name=\"" + Escape(model_name) + "\"";
  auto gauge = [&](const std::string& name, const std::string& help, double v) {
    Family(&out, name, "gauge", help);
    out += name + "{" + ml + "} " + Num(v) + "\n";
  };
  // Counter families are named with their _total suffix, as prometheus_client writes them.
  auto counter = [&](const std::string& name, const std::string& help, int64_t v) {
    Family(&out, name + "_total", "counter", help);
    out += name + "_total{" + ml + "} " + std::to_string(v) + "\n";
  };
  gauge("vllm:num_requests_running", "Number of requests in model execution batches.",
        s.engine.num_running);
  gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.",
        s.engine.num_waiting);
  gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.",
        s.engine.kv_cache_usage);
  Family(&out, "vllm:lora_requests_info", "gauge", "Running stats on lora requests.");
  out += "vllm:lora_requests_info{" + ml + ",max_lora=\"" + std::to_string(s.max_lora) +
         "\",running_lora_adapters=\"" + Escape(Join(s.engine.running_adapters)) +
         "\",waiting_lora_adapters=\"" + Escape(Join(s.engine.waiting_adapters)) + "\"} " +
         Num(s.engine.updated_unix_s) + "\n";
  counter("vllm:prompt_tokens", "Number of prefill tokens processed.", m.prompt_tokens.load());
  counter("vllm:generation_tokens", "Number of generation tokens processed.",
          m.generation_tokens.load());
  Family(&out, "vllm:request_success_total", "counter", "Count of successfully processed requests.");
  const std::pair<const char*, int64_t> reasons[] = {{"stop", m.success_stop.load()},
                                                     {"length", m.success_length.load()},
                                                     {"abort", m.success_abort.load()},
                                                     {"error", m.success_error.load()}};
  for (const auto& [reason, v] : reasons) {
    out += "vllm:request_success_total{" + ml + ",finished_reason=\"" + reason + "\"} " +
           std::to_string(v) + "\n";
  }
  counter("vllm:prefix_cache_queries", "Prefix cache queries, in prompt tokens.",
          s.engine.prefix_queries);
  counter("vllm:prefix_cache_hits", "Prefix cache hits, in prompt tokens.",
          s.engine.prefix_hits);
  counter("vllm:num_preemptions", "Cumulative number of preemptions from the engine.",
          s.engine.num_preemptions);
  m.ttft.Render("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
                ml, &out);
  m.itl.Render("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.",
               ml, &out);
  m.e2e.Render("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.",
               ml, &out);
  counter("loom_adapter_loads", "Adapters loaded from disk (start-up, endpoint, on demand).",
          s.adapter_loads);
  counter("loom_adapter_evictions", "Loaded adapters evicted by the LRU (max-cpu-loras).",
          s.adapter_evictions);
  gauge("loom_adapters_resident", "Adapters loaded in memory now.", s.adapters_resident);
  auto steps = [&](const std::string& name, const std::string& help, const auto& h) {
    RenderHistogram(name, help, ml, h.bounds.data(), h.bounds.size(), h.counts.data(), h.sum, &out);
  };
  const StepCounts& sc = s.engine.step_counts;
  steps("loom_step_tokens", "Engine steps by the token rows they computed.", sc.tokens);
  steps("loom_step_sequences", "Engine steps by the sequences they advanced.", sc.sequences);
  steps("loom_step_adapters", "Engine steps by the distinct adapters they applied.", sc.adapters);
  gauge("loom_large_prompts_tokenizing",
        "Requests of 256 KiB or more of text being tokenized now (one at a time).",
        s.large_prompts_tokenizing);
  gauge("loom_large_prompts_waiting",
        "Requests of 256 KiB or more of text waiting to be tokenized.", s.large_prompts_waiting);
  counter("loom_large_prompts_abandoned",
          "Requests of 256 KiB or more of text dropped because their client left, while waiting "
          "to be tokenized or while being tokenized.",
          s.large_prompts_abandoned);
  return out;
}

}  // namespace loom::server
