// libFuzzer target for OpenAI request bodies (server/openai_request): any bytes, for any of the
// four endpoints, give either a 400 naming a field or a request whose every size and count is in
// the range the server sizes work from (n, logprobs, stop strings, token ids, max_tokens), and
// whose sampling parameters validate or fail with a Status — never a crash or an exception.
//
// Input: one selector byte (the endpoint), then the body. Seeds: corpus/openai_request/.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "server/openai_request.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  using loom::server::Endpoint;
  constexpr Endpoint kEndpoints[] = {Endpoint::kCompletions, Endpoint::kChat, Endpoint::kTokenize,
                                     Endpoint::kDetokenize};
  const Endpoint endpoint = kEndpoints[data[0] % 4];
  const std::string body(reinterpret_cast<const char*>(data) + 1, size - 1);
  loom::server::OpenAiRequest r;
  loom::server::ApiError error;
  if (!loom::server::ParseOpenAiRequest(body, endpoint, &r, &error)) {
    if (error.http_status < 400 || error.http_status > 499 || error.message.empty()) std::abort();
    return 0;
  }
  if (r.n < 1 || r.n > 16 || r.logprobs < 0 || r.logprobs > 20 || r.prompt_logprobs > 20 ||
      r.stop.size() > 16) {
    std::abort();
  }
  for (const std::string& s : r.stop) {
    if (s.empty() || s.size() > 256) std::abort();
  }
  if (endpoint == Endpoint::kCompletions && r.prompts.empty()) std::abort();
  if (endpoint == Endpoint::kChat && !r.has_messages()) std::abort();
  if (r.params.max_tokens < 0) std::abort();
  // What the handler does next: the logit_bias budget over every sequence, then the sampling
  // parameters against a vocabulary.
  const int64_t sequences = static_cast<int64_t>(r.prompts.empty() ? 1 : r.prompts.size()) * r.n;
  loom::server::ApiError budget;
  if (!loom::server::CheckLogitBiasBudget(r, sequences, &budget) && budget.http_status != 400) {
    std::abort();
  }
  (void)r.params.Validate(1000);
  return 0;
}
