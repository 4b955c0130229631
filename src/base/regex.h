// Regex (PCRE2, Python-compatible syntax for the patterns PEFT configs use): full and prefix matches.
#pragma once

#include <memory>
#include <string>

#include "base/status.h"

namespace loom {

// Thread-safety: a compiled Regex may be matched from several threads (match data is per call).
class Regex {
 public:
  // `what` names the pattern's origin in errors, e.g. "adapter_config.json target_modules".
  static StatusOr<Regex> Compile(const std::string& pattern, const std::string& what);

  // Python re.fullmatch(pattern, text) is not None. A match that would take more than 100,000
  // backtracking steps counts as no match (patterns come from files: bounded time per name).
  bool FullMatch(const std::string& text) const;
  // Python re.match(pattern, text) is not None (anchored at the start only).
  bool PrefixMatch(const std::string& text) const;
  const std::string& pattern() const { return pattern_; }

 private:
  struct Code;
  std::string pattern_;
  std::shared_ptr<Code> code_;
};

}  // namespace loom
