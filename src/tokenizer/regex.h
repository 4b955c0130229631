// PCRE2 regular expressions with the matching rules of the HF tokenizers library (Oniguruma).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "base/status.h"

namespace loom::tokenizer {

// A compiled pattern (UTF-8, Unicode properties, JIT). Immutable after Compile; Find* may be
// called from many threads at once (match data is per call, the JIT stack per thread).
class Regex {
 public:
  // `\s` / `\S` are rewritten to Oniguruma's White_Space set (PCRE2's differs at U+180E).
  static StatusOr<std::unique_ptr<Regex>> Compile(std::string_view pattern);
  // Builds a regex that matches `literal` exactly.
  static StatusOr<std::unique_ptr<Regex>> Literal(std::string_view literal);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Appends the [begin, end) byte ranges of the non-overlapping matches in `s` (valid UTF-8),
  // leftmost first, like Oniguruma's find_iter. kResourceExhausted naming the pattern when one
  // match attempt hits kMatchLimit backtracking steps or the JIT stack (catastrophic
  // backtracking), never a silently short result.
  Status FindAll(std::string_view s, std::vector<std::pair<size_t, size_t>>* out) const;

  // PCRE2 match limit per match attempt (its own default; ~10 ms of backtracking).
  static constexpr uint32_t kMatchLimit = 10'000'000;
  // PCRE2 backtracking depth / heap for the interpreter (when JIT is unavailable), in KiB.
  static constexpr uint32_t kHeapLimitKib = 64 * 1024;

  const std::string& pattern() const { return pattern_; }

 private:
  Regex() = default;
  std::string pattern_;
  void* code_ = nullptr;  // pcre2_code_8*
};

// A CPU-time budget for every Regex::FindAll this thread runs while the scope is open (the
// outermost scope governs; inner ones change nothing). kMatchLimit bounds one match attempt, not
// their number: a tokenizer.json pattern that backtracks just under the limit at every position
// took ~1.7 ms per byte (a 1 MB prompt: half an hour). Tokenizer::Encode and DecodeChecked open
// one per call: kBaseSeconds + kSecondsPerMiB per MiB of their text, in this thread's CPU time
// since the scope opened (so a loaded machine does not shorten it); the tokenizers measured
// encode at ~10 MB/s. Once spent, every FindAll in the scope fails at once.
class RegexBudgetScope {
 public:
  explicit RegexBudgetScope(size_t text_bytes);
  ~RegexBudgetScope();
  // The budget ran out (some FindAll failed for it); false for an inner, non-owning scope.
  bool exhausted() const;
  RegexBudgetScope(const RegexBudgetScope&) = delete;
  RegexBudgetScope& operator=(const RegexBudgetScope&) = delete;

  static constexpr double kBaseSeconds = 1.0;
  static constexpr double kSecondsPerMiB = 4.0;
  // The budget for a text of `text_bytes`, in seconds of CPU.
  static double SecondsFor(size_t text_bytes) {
    return kBaseSeconds + kSecondsPerMiB * static_cast<double>(text_bytes) / (1 << 20);
  }

 private:
  bool owner_ = false;
};

// A tokenizer.json pattern: {"String": literal} or {"Regex": pattern}. Copyable (shares the
// compiled regex); thread-safe like Regex.
class Pattern {
 public:
  // `where` names the component for error messages.
  static StatusOr<Pattern> FromJson(const nlohmann::json& j, const std::string& where);
  static StatusOr<Pattern> FromLiteral(std::string literal);

  Status FindAll(std::string_view s, std::vector<std::pair<size_t, size_t>>* out) const;
  // Replaces every match with `content`; kResourceExhausted when the result would exceed
  // `max_bytes` (checked before it is built). `matches`, when given, receives the ranges of `s`
  // that were replaced.
  StatusOr<std::string> ReplaceAll(std::string_view s, std::string_view content, size_t max_bytes,
                                   std::vector<std::pair<size_t, size_t>>* matches = nullptr) const;

 private:
  std::string literal_;
  std::shared_ptr<const Regex> regex_;  // null for a literal
};

}  // namespace loom::tokenizer
