// libFuzzer target for --batch files (cli/request_check): any bytes give a Status; accepted
// entries have ids in the vocabulary, max_tokens ≥ 1 and prompt + max_tokens within the
// context, so nothing sized from them can overflow.
//
// Seeds: corpus/batch/.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <string>

#include "cli/request_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const loom::ModelConfig config = [] {
    loom::ModelConfig c;
    c.vocab_size = 1000;
    c.max_position_embeddings = 4096;
    return c;
  }();
  static const std::map<std::string, int> slots = {{"sql", 0}, {"chat", 1}};
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  int64_t total = 0;
  auto entries =
      loom::cli::ParseBatchRequests(text, "fuzz/batch.json", config, slots, {}, &total);
  if (!entries.ok()) return 0;
  int64_t sum = 0;
  for (const auto& e : *entries) {
    const auto& r = e.request;
    if (r.prompt.empty() || r.params.max_tokens < 1) std::abort();
    for (int32_t t : r.prompt) {
      if (t < 0 || t >= config.vocab_size) std::abort();
    }
    if (static_cast<int64_t>(r.prompt.size()) + r.params.max_tokens > config.max_position_embeddings) {
      std::abort();
    }
    if (r.adapter_slot < -1 || r.adapter_slot > 1) std::abort();
    sum += static_cast<int64_t>(r.prompt.size()) + r.params.max_tokens;
  }
  if (sum != total) std::abort();
  return 0;
}
