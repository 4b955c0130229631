// libFuzzer target for the Sampler over arbitrary logits (NaN, ±inf, denormals, huge values)
// and arbitrary parameters: a valid parameter set always gives a token in [0, vocab) or a
// Status — never an out-of-bounds read (keep = 0 read order_[-1] before).
//
// Input: 32 bytes of parameters, then the logits as raw floats. Seeds: corpus/sampler/.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "engine/sampler.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 32 + sizeof(float)) return 0;
  loom::SamplingParams p;
  float f[6];
  std::memcpy(f, data, sizeof(f));
  p.temperature = f[0];
  p.top_p = f[1];
  p.min_p = f[2];
  p.repetition_penalty = f[3];
  p.presence_penalty = f[4];
  p.frequency_penalty = f[5];
  p.top_k = static_cast<int8_t>(data[24]);
  p.logprobs = data[25] % 21;
  p.seed = data[26];
  const int steps = 1 + data[27] % 4;
  const size_t vocab = (size - 32) / sizeof(float);
  if (vocab > (1 << 16)) return 0;
  std::vector<float> logits(vocab);
  std::memcpy(logits.data(), data + 32, vocab * sizeof(float));
  if (!p.Validate(static_cast<int>(vocab)).ok()) return 0;
  std::vector<int32_t> prompt;
  for (size_t i = 0; i < 4 && i < vocab; ++i) prompt.push_back(static_cast<int32_t>(i * 7 % vocab));
  loom::Sampler s(p, prompt);
  for (int step = 0; step < steps; ++step) {
    std::vector<float> row = logits;
    loom::TokenLogprob chosen{};
    std::vector<loom::TokenLogprob> top;
    auto t = s.Sample(row.data(), static_cast<int>(vocab), &chosen, &top);
    if (!t.ok()) continue;
    if (*t < 0 || *t >= static_cast<int32_t>(vocab)) std::abort();
    s.Accept(*t);
  }
  return 0;
}
