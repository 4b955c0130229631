// Python `re` patterns (how PEFT and transformers match module names) translated to PCRE2.
#pragma once

#include <string>
#include <string_view>

#include "base/status.h"

namespace loom {

// A Python pattern as PCRE2 (UTF mode) reads it, with what the caller needs to compile it.
struct PcreTranslation {
  std::string pattern;  // PCRE2 syntax; ASCII text (other characters as \x{...})
  bool ascii = false;   // (?a) at the start: compile without PCRE2_UCP (\w, \d, \s, \b ASCII-only)
  int python_groups = 0;               // capturing groups as Python numbers them
  int pcre_groups = 0;                 // of those, the ones left capturing in `pattern`
  bool top_level_alternation = false;  // a | outside every group
};

// Translates `pattern`, read as CPython 3.11+ reads a str pattern, into a PCRE2 pattern that
// matches exactly the same strings, or refuses it: an error where Python raises re.error, and
// an error (naming the construct) for what loom cannot match the same way. Rewritten:
//   {,n} → {0,n}, {,} → *, a { that is no repeat → \{   (PCRE2 10.42 reads {,n} as text)
//   \uXXXX, \UXXXXXXXX, \xXX, octal → \x{...}; \Z → \z; \v → \x{b} (PCRE2: a class)
//   \s, \S → Python's str.isspace() set (PCRE2's Unicode \s lacks U+001C..U+001F, adds U+180E)
//   (?P<name>...) → a numbered group; (?P=name), \N → \g{N}; (?(name)...) → (?(N)...)
//   in a class, [ is a literal (Python has no [:digit:] classes); (?x) whitespace and
//   comments dropped; case-insensitive I/i/İ/ı and three other pairs Python folds together
//   spelled out (PCRE2 does not fold them)
// Refused as Python refuses them: (?<name>, (?R), (?|, \p{..}, \Q, \K, \R, \h, \C, \k, \g,
// (*VERB), mid-pattern global flags like a(?i), lookbehinds of varying width, bad escapes,
// unbalanced parentheses, and the rest of re/_parser.py's errors. Refused by loom: \N{name},
// surrogate code points, non-ASCII group names, (?a) scoped or with (?i), (?t), counts above
// 65,535 and groups nested deeper than 100.
//
// Only groups a back-reference or a condition names stay capturing (`capture_group1`: group 1
// too, read back by the caller): PCRE2 copies every capture slot on each backtracking step,
// which made 5,000 groups cost a second per match.
//
// Errors: kInvalidArgument, "<reason> at position N" (N counts characters, as re.error.pos).
StatusOr<PcreTranslation> TranslatePythonRegex(std::string_view pattern,
                                               bool capture_group1 = false);

}  // namespace loom
