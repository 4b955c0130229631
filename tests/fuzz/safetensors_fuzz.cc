// libFuzzer target for ParseSafetensors: any bytes give a status, and accepted views lie inside.
//
// Seeds in corpus/safetensors/: valid-*.safetensors were written by WriteSafetensors (F32,
// F16, BF16, metadata, scalar and empty tensors); bad-*.safetensors each break one rule the
// parser checks (see tests/unit/safetensors_test.cc for the same cases with their messages).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <string>

#include "io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::map<std::string, std::string> metadata;
  auto infos = loom::ParseSafetensors(data, size, "fuzz.safetensors", &metadata);
  if (!infos.ok()) {
    if (infos.status().message().empty()) std::abort();  // errors always say something
    return 0;
  }
  // Read every accepted byte so the sanitizers see an out-of-bounds view.
  uint8_t sum = 0;
  for (const loom::TensorInfo& info : *infos) {
    if (info.nbytes > 0 && (info.data < data || info.data + info.nbytes > data + size)) {
      std::abort();
    }
    for (size_t i = 0; i < info.nbytes; ++i) sum ^= info.data[i];
    for (int64_t d : info.shape) {
      if (d < 0) std::abort();
    }
  }
  volatile uint8_t sink = sum;
  (void)sink;
  return 0;
}
