// libFuzzer target for Regex::Compile (Python re syntax translated to PCRE2): any bytes give a
// status.
//
// A pattern that compiles is matched against module names under a RegexLimitScope (full and
// prefix, group 1 read back); one that does not gets an error that names its origin. Seeds:
// corpus/regex/ (the constructs of tests/unit/py_regex_test.cc, one pattern per file).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>

#include "base/regex.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string pattern(reinterpret_cast<const char*>(data), size);
  for (bool group1 : {false, true}) {
    auto re = loom::Regex::Compile(pattern, "fuzz pattern", group1);
    if (!re.ok()) {
      if (re.status().message().rfind("fuzz pattern: ", 0) != 0) std::abort();
      // File text is quoted clipped: 200 bytes of pattern and of reason, each byte at most 4.
      if (re.status().message().size() > 2000) std::abort();
      continue;
    }
    loom::RegexLimitScope scope;
    for (const char* name : {"model.layers.0.self_attn.q_proj", "model.norm", "", "lm_head"}) {
      re->FullMatch(name);
      std::optional<std::string> g = "(left from before)";
      if (re->PrefixMatch(name, &g) != re->PrefixMatch(name)) std::abort();
      if (g && !group1) std::abort();  // group 1 is read back only when asked for (else reset)
    }
  }
  return 0;
}
