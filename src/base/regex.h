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
  // backtracking steps counts as no match (patterns come from files: bounded time per name) and
  // is recorded in this thread's innermost RegexLimitScope, which turns it into an error.
  bool FullMatch(const std::string& text) const;
  // Python re.match(pattern, text) is not None (anchored at the start only).
  bool PrefixMatch(const std::string& text) const;
  const std::string& pattern() const { return pattern_; }

 private:
  struct Code;
  std::string pattern_;
  std::shared_ptr<Code> code_;
};

// While alive, records the first match on this thread that hit the step limit (scopes nest: the
// innermost records). A loader opens one around everything it matches and fails with status()
// instead of serving a "no match" that was only a timeout (a module left unadapted, an
// alpha_pattern left unapplied).
class RegexLimitScope {
 public:
  RegexLimitScope();
  ~RegexLimitScope();
  RegexLimitScope(const RegexLimitScope&) = delete;
  RegexLimitScope& operator=(const RegexLimitScope&) = delete;

  // OK, or InvalidArgument naming the pattern, where it came from and the text it was matched to.
  Status status() const;
  // Called by Regex on a limit hit (what: the pattern's origin).
  static void Record(const std::string& what, const std::string& pattern, const std::string& text);

 private:
  RegexLimitScope* outer_;
  std::string first_;  // empty: no limit hit
};

}  // namespace loom
