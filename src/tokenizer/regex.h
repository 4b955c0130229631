// PCRE2 regular expressions with the matching rules of the HF tokenizers library (Oniguruma).
#pragma once

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
  // leftmost first, like Oniguruma's find_iter.
  void FindAll(std::string_view s, std::vector<std::pair<size_t, size_t>>* out) const;
  // Replaces every match with `content`.
  std::string ReplaceAll(std::string_view s, std::string_view content) const;

  const std::string& pattern() const { return pattern_; }

 private:
  Regex() = default;
  std::string pattern_;
  void* code_ = nullptr;  // pcre2_code_8*
};

// A tokenizer.json pattern: {"String": literal} or {"Regex": pattern}. Copyable (shares the
// compiled regex); thread-safe like Regex.
class Pattern {
 public:
  // `where` names the component for error messages.
  static StatusOr<Pattern> FromJson(const nlohmann::json& j, const std::string& where);
  static StatusOr<Pattern> FromLiteral(std::string literal);

  void FindAll(std::string_view s, std::vector<std::pair<size_t, size_t>>* out) const;
  std::string ReplaceAll(std::string_view s, std::string_view content) const;

 private:
  std::string literal_;
  std::shared_ptr<const Regex> regex_;  // null for a literal
};

}  // namespace loom::tokenizer
