// Regex: Python `re` patterns from config files (PEFT, quantization), matched by PCRE2.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "base/status.h"

namespace loom {

// Thread-safety: a compiled Regex may be matched from several threads (match data is per call).
class Regex {
 public:
  // `pattern` in Python's syntax, with Python's meaning (TranslatePythonRegex: a construct PCRE2
  // would read otherwise is rewritten or refused). `what` names the pattern's origin in errors,
  // e.g. "adapter_config.json target_modules". `capture_group1`: PrefixMatch can read group 1.
  // A pattern that keeps more than kMaxCaptures groups capturing (those back-references and
  // conditions name) is refused: each costs PCRE2 a copy per backtracking step.
  static StatusOr<Regex> Compile(const std::string& pattern, const std::string& what,
                                 bool capture_group1 = false);
  static constexpr int kMaxCaptures = 32;
  // A longer pattern is refused before it is translated (real ones are under 1 KB).
  static constexpr size_t kMaxPatternBytes = size_t{64} << 10;

  // Python re.fullmatch(pattern, text) is not None. A match that would take more than 100,000
  // backtracking steps counts as no match (patterns come from files: bounded time per name) and
  // is recorded in this thread's innermost RegexLimitScope, which turns it into an error.
  bool FullMatch(const std::string& text) const;
  // Python re.match(pattern, text) is not None (anchored at the start only).
  bool PrefixMatch(const std::string& text) const;
  // The same, and match.group(1) (nullopt when the group took no part, or without
  // capture_group1 at Compile).
  bool PrefixMatch(const std::string& text, std::optional<std::string>* group1) const;
  const std::string& pattern() const { return pattern_; }  // as given, in Python's syntax
  int python_groups() const { return python_groups_; }     // capturing groups Python counts
  bool top_level_alternation() const { return top_level_alternation_; }  // a | outside groups

 private:
  struct Code;
  std::string pattern_;
  int python_groups_ = 0;
  bool top_level_alternation_ = false;
  std::shared_ptr<Code> code_;
};

// While alive, records the first match on this thread that hit the step limit (scopes nest: the
// innermost records). A loader opens one around everything it matches and fails with status()
// instead of serving a "no match" that was only a timeout (a module left unadapted, an
// alpha_pattern left unapplied). Once a limit is hit, later matches in the scope return "no
// match" at once (the load fails anyway: 65,536 ignore patterns each spending the full limit
// on every projection ran for an hour), and all matches in one scope together get
// kScopeBudgetMs of time: patterns that each stay just under the step limit are an error too.
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
  // Whether the innermost scope has already failed (limit hit or time budget spent). False
  // outside any scope.
  static bool Failed();
  // Adds the time one match took to the innermost scope's total (fails it past the budget).
  static void Spent(std::chrono::steady_clock::duration d);
  static constexpr int64_t kScopeBudgetMs = 5000;
  // Whether the failure is the time budget (which a busy machine can spend on patterns that
  // pass when it is idle), not a pattern's step limit (the same on every run).
  bool over_time() const { return over_time_; }

 private:
  RegexLimitScope* outer_;
  std::string first_;  // empty: no limit hit
  bool over_time_ = false;
  std::chrono::steady_clock::duration spent_{};  // inside matches only
};

}  // namespace loom
