// Python `re` constructs through Regex: each matches what CPython 3.11's re does, or is refused.
#include "base/py_regex.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "base/regex.h"

namespace loom {
namespace {

struct Case {
  const char* pattern;
  std::string text;
  bool full;    // re.fullmatch(pattern, text) is not None, in CPython 3.11
  bool prefix;  // re.match(pattern, text) is not None
};

// Every expected value below is what python3.11 -c 'import re; ...' printed.
const std::vector<Case>& Cases() {
  static const std::vector<Case> cases = {
      // {,n} is {0,n} in Python; PCRE2 10.42 read it as the text "{,1}" (the audit's
      // alpha_pattern).
      {R"(layers\.[0-9]{,1}\.mlp\.down_proj)", "layers.1.mlp.down_proj", true, true},
      {R"(layers\.[0-9]{,1}\.mlp\.down_proj)", "layers..mlp.down_proj", true, true},
      {R"(layers\.[0-9]{,1}\.mlp\.down_proj)", "layers.12.mlp.down_proj", false, false},
      {R"(layers\.[0-9]{,1}\.mlp\.down_proj)", "layers.{,1}.mlp.down_proj", false, false},
      {R"((.*\.)?(layers\.[0-9]{,1}\.mlp\.down_proj)$)", "model.layers.1.mlp.down_proj", true,
       true},
      {"a{,}b", "aaab", true, true},  // {,} is *
      {"a{,}b", "a{,}b", false, false},
      {"a{}b", "a{}b", true, true},  // a { that starts no repeat is text
      {"a{b", "a{b", true, true},
      {"a{1,2", "a{1,2", true, true},
      // No POSIX classes: [[:digit:]] is the set [:digt followed by a literal ].
      {"[[:digit:]]", "1", false, false},
      {"[[:digit:]]+", "d]", true, true},
      {"[[:digit:]]+", "12", false, false},
      {"[]a]", "]", true, true},  // ] first is a literal
      {"[a-]", "-", true, true},
      {R"(\]\}\{-)", "]}{-", true, true},
      // Named groups and references, numbered in the translation.
      {"(?P<n>a)(?P=n)", "aa", true, true},
      {"(?P<n>a)(?P=n)", "ab", false, false},
      {R"((a)\1)", "aa", true, true},
      {"(a)?(?(1)b|c)", "ab", true, true},
      {"(a)?(?(1)b|c)", "c", true, true},
      {"(a)?(?(1)b|c)", "ac", false, false},
      {"(?P<x>a)?(?(x)b|c)", "c", true, true},
      // Escapes PCRE2 spells otherwise.
      {R"(\u0041\U00000042\x43)", "ABC", true, true},
      {R"(\101\0)", std::string("A\0", 2), true, true},
      {R"(a\Z)", "a\n", false, false},  // \Z is the very end (PCRE2's \z)
      {"a$", "a\n", false, true},
      {"(?m)a$\n^", "a\n", true, true},  // multiline ^ after a final newline
      {R"(\v)", "\x0b", true, true},     // one character, not PCRE2's vertical-space class
      {R"(\v)", "\n", false, false},
      {R"([\v])", "\n", false, false},
      // \s is str.isspace(): U+001C..U+001F are spaces, U+180E is not.
      {R"(\s)", "\x1c", true, true},
      {R"(\s)", "\xe1\xa0\x8e", false, false},
      {R"(\S)", "\xe1\xa0\x8e", true, true},
      {R"([^\S])", "\x1c", true, true},
      {R"([a\S])", "\x1c", false, false},
      {R"([a\S])", "\xe1\xa0\x8e", true, true},
      {R"([^a\S])", " ", true, true},
      {R"([^a\S])", "a", false, false},
      // Unicode-aware \d and \w in a str pattern; ASCII-only with (?a).
      {R"(\d)", "\xd9\xa3", true, true},  // ARABIC-INDIC DIGIT THREE
      {R"(\w+)", "\xc3\xa9t\xc3\xa9", true, true},
      {R"((?a)\w)", "\xc3\xa9", false, false},
      {R"((?a)\d)", "\xd9\xa3", false, false},
      // Case-insensitive: Python folds I, i, İ and ı together.
      {"(?i)i", "\xc4\xb0", true, true},
      {"(?i)i", "\xc4\xb1", true, true},
      {"(?i)[^i]", "\xc4\xb1", false, false},
      {"(?i)[h-j]", "\xc4\xb0", true, true},
      {"(?i)K", "\xe2\x84\xaa", true, true},  // KELVIN SIGN
      // Verbose mode: whitespace and comments are not part of the pattern.
      {"(?x) a b # c", "ab", true, true},
      {"(?x) a b # c", "a b", false, false},
      {R"((?x)a\ b)", "a b", true, true},
      {"(?x)[ ]", " ", true, true},
      {"a(?#c)*", "aaa", true, true},  // the * repeats a: the comment is no item
      // Lookarounds (repeatable in Python), possessive and atomic (Python 3.11).
      {"(?=a)*b", "b", true, true},
      {"a(?<=a)b", "ab", true, true},
      {"a++b", "aab", true, true},
      {"a*+a", "aaa", false, false},
      {"(?>a*)a", "aaa", false, false},
      {R"(\B)", "", false, false},  // Python ≤ 3.13: \B never matches an empty string
      {R"(a\B)", "ab", false, true},
      {"a.b", "a\nb", false, false},
      {"(?s)a.b", "a\nb", true, true},
  };
  return cases;
}

TEST(PyRegex, MatchesWhatPythonMatches) {
  for (const Case& c : Cases()) {
    auto r = Regex::Compile(c.pattern, "test");
    ASSERT_TRUE(r.ok()) << c.pattern << ": " << r.status().ToString();
    EXPECT_EQ(r->FullMatch(c.text), c.full) << c.pattern << " fullmatch '" << c.text << "'";
    EXPECT_EQ(r->PrefixMatch(c.text), c.prefix) << c.pattern << " match '" << c.text << "'";
  }
}

TEST(PyRegex, RewritesWhatPcre2ReadsOtherwise) {
  const std::vector<std::pair<const char*, const char*>> rewrites = {
      {"a{,3}", "a{0,3}"},
      {"a{,}", "a*"},
      {"a{2,}", "a{2,}"},
      {"a{}", "a\\{\\}"},
      {"[[:digit:]]", "[\\[\\:digit\\:]\\]"},
      {R"(\u00e9\U0001F600)", "\\x{e9}\\x{1f600}"},
      {R"(a\Z)", "a\\z"},
      {R"(\v)", "\\x{b}"},
      {R"((?P<name>a)(?P=name))", "(a)\\g{1}"},
      {"(?P<name>a)(b)", "(?:a)(?:b)"},  // groups nothing refers back to do not capture
      {"(a)(b)\\2", "(?:a)(b)\\g{1}"},
      {"(?x) a  b\t#c\n", "ab"},
      {"(?i)a(?-i:b)", "(?i)a(?-i:b)"},
      {"(?=a)", "(?:(?=a))"},
  };
  for (const auto& [python, pcre] : rewrites) {
    auto t = TranslatePythonRegex(python);
    ASSERT_TRUE(t.ok()) << python << ": " << t.status().ToString();
    EXPECT_EQ(t->pattern, pcre) << python;
  }
  auto t = TranslatePythonRegex("(a)(?P<x>b)c", /*capture_group1=*/true);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->pattern, "(a)(?:b)c");
  EXPECT_EQ(t->python_groups, 2);
  EXPECT_EQ(t->pcre_groups, 1);
}

// What Python refuses (its re.error text), and what loom refuses that Python takes.
TEST(PyRegex, LongPatternsAreRefusedBeforeTheyAreTranslated) {
  // Each \s is written out as a ~100-byte set: 5.6 M of them (a 16 MiB config) took ~3-4 GB.
  std::string spaces;
  for (int i = 0; i < 40000; ++i) spaces += "\\s";
  auto r = Regex::Compile(spaces, "adapter_config.json: target_modules");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("is 80000 bytes; loom allows 65536"), std::string::npos)
      << r.status().message();
  EXPECT_TRUE(Regex::Compile(spaces.substr(0, 400), "t").ok());  // 200 \\s: ~20 KB translated
}

TEST(PyRegex, RefusesWhatPythonRefusesWithItsReason) {
  const std::vector<std::pair<const char*, const char*>> errors = {
      {"(?<name>a)", "unknown extension ?<n"},  // PCRE2's named group
      {"(?R)", "unknown extension ?R"},         // recursion
      {"(a(?1))", "unknown extension ?1"},
      {"(?|a)", "unknown extension ?|"},  // branch reset
      {"a(?i)b", "global flags not at the start of the expression at position 1"},
      {"a|(?i)b", "global flags not at the start"},
      {R"(\C)", "bad escape \\C"},
      {R"(\p{L})", "bad escape \\p"},
      {R"(\Qa.b\E)", "bad escape \\Q"},
      {R"(a\Kb)", "bad escape \\K"},
      {R"(\R)", "bad escape \\R"},
      {R"(\h)", "bad escape \\h"},
      {R"(\z)", "bad escape \\z"},
      {R"(\k<n>)", "bad escape \\k"},
      {R"(\x{41})", "incomplete escape \\x"},
      {"(*FAIL)", "nothing to repeat at position 1"},  // no backtracking verbs
      {"a**", "multiple repeat"},
      {"a{2}{3}", "multiple repeat"},
      {R"(\b*)", "nothing to repeat"},
      {"a{2,1}", "min repeat greater than max repeat"},
      {"(?<=a|bc)d", "look-behind requires fixed-width pattern"},
      {"(?<=a+)b", "look-behind requires fixed-width pattern"},
      {R"((a)\2)", "invalid group reference 2"},
      {R"((a\1))", "cannot refer to an open group"},
      {"(?P<a>x)(?P<a>y)", "redefinition of group name 'a' as group 2; was group 1"},
      {"(?(1)a|b|c)(x)", "conditional backref with more than two branches"},
      {"[z-a]", "bad character range z-a"},
      {R"([\d-z])", "bad character range \\d-z"},
      {"[]", "unterminated character set"},
      {"(a", "missing ), unterminated subpattern"},
      {"a)", "unbalanced parenthesis"},
      {"a\\", "bad escape (end of pattern)"},
      {"(?L)a", "cannot use 'L' flag with a str pattern"},
      {"(?au)a", "flags 'a', 'u' and 'L' are incompatible"},
      {R"(\400)", "octal escape value \\400 outside of range 0-0o377"},
      // loom's own refusals, each naming the construct.
      {R"(\N{EM DASH})", "named Unicode escapes (\\N{EM DASH}) are not supported by loom"},
      {R"(\ud800)", "surrogate code point \\ud800 is not supported by loom"},
      {"(?a:x)", "(?a:...) (ASCII-only matching in part of a pattern) is not supported"},
      {"(?ai)x", "(?a) with (?i) (ASCII-only case folding) is not supported by loom"},
      {"(?t)x", "the template flag (?t) is not supported"},
      {"(?P<\xc3\xa9>x)", "is not ASCII (loom accepts ASCII names only)"},
      {"x{65536}", "repeat count above 65535 (loom's limit)"},
  };
  for (const auto& [pattern, reason] : errors) {
    auto t = TranslatePythonRegex(pattern);
    ASSERT_FALSE(t.ok()) << pattern << " → " << t->pattern;
    EXPECT_NE(t.status().message().find(reason), std::string::npos)
        << pattern << ": " << t.status().message();
  }
  std::string deep;
  for (int i = 0; i < 101; ++i) deep += "(";
  for (int i = 0; i < 101; ++i) deep += ")";
  auto t = TranslatePythonRegex(deep);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("nested more than 100 deep"), std::string::npos);
  EXPECT_TRUE(TranslatePythonRegex(deep.substr(1, 200)).ok());  // 100 deep
  std::string conditions = "(a)";  // conditions nest without a group between them
  for (int i = 0; i < 100000; ++i) conditions += "(?(1)";
  EXPECT_FALSE(TranslatePythonRegex(conditions).ok());  // an error, not a stack overflow
  EXPECT_FALSE(TranslatePythonRegex("\xff").ok());      // not UTF-8
}

// The audit's pattern: 5,000 groups made PCRE2 copy 80 KB per backtracking step, a second per
// match, and the load spent the 5 s budget. Groups nothing refers back to no longer capture.
TEST(PyRegex, ThousandsOfGroupsCostNothingWhenNothingReadsThem) {
  std::string pattern;
  for (int i = 0; i < 5000; ++i) pattern += "()";
  pattern += R"(.*\.(q|v)_proj)";
  auto r = Regex::Compile(pattern, "test");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  RegexLimitScope scope;
  for (int i = 0; i < 200; ++i) {
    EXPECT_FALSE(r->FullMatch("model.layers.11.self_attn.k_proj.x.y.z.w.a.b.c.d"));
  }
  EXPECT_TRUE(r->FullMatch("model.layers.11.self_attn.q_proj"));
  EXPECT_TRUE(scope.status().ok()) << scope.status().ToString();  // ~0.1 ms a match, not 1 s
}

TEST(PyRegex, MoreThan32GroupsReferredBackAreRefused) {
  std::string ok, refused;
  for (int i = 1; i <= 33; ++i) refused += "(a)\\" + std::to_string(i);
  for (int i = 1; i <= 32; ++i) ok += "(a)\\" + std::to_string(i);
  EXPECT_TRUE(Regex::Compile(ok, "test").ok());
  auto r = Regex::Compile(refused, "cfg target_modules");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("cfg target_modules: regular expression '(a)\\1(a)\\2"),
            std::string::npos)
      << r.status().message();
  EXPECT_NE(r.status().message().find("refers back to 33 groups"), std::string::npos);
}

// A pattern from a file reaches the message clipped and with control bytes escaped.
TEST(PyRegex, CompileErrorsQuoteThePatternClippedAndEscaped) {
  const std::string pattern = "\x1b(" + std::string(60000, 'a');
  auto r = Regex::Compile(pattern, "cfg");
  ASSERT_FALSE(r.ok());
  const std::string& m = r.status().message();
  EXPECT_LT(m.size(), 400u) << m.size();
  EXPECT_EQ(m.find('\x1b'), std::string::npos);
  EXPECT_NE(m.find("cfg: invalid regular expression '\\x1b(aaa"), std::string::npos) << m;
  EXPECT_NE(m.find("missing ), unterminated subpattern at position 1"), std::string::npos) << m;
}

TEST(PyRegex, PrefixMatchReadsGroupOne) {
  auto r = Regex::Compile(R"(.*\.layers\.(\d+)\.)", "test", /*capture_group1=*/true);
  ASSERT_TRUE(r.ok());
  std::optional<std::string> g;
  EXPECT_TRUE(r->PrefixMatch("model.layers.3.mlp.experts.5.w1", &g));
  EXPECT_EQ(g, "3");
  EXPECT_FALSE(r->PrefixMatch("model.norm", &g));
  EXPECT_FALSE(g.has_value());
  auto alt = Regex::Compile("(a)|b", "test", /*capture_group1=*/true);
  ASSERT_TRUE(alt.ok());
  EXPECT_TRUE(alt->PrefixMatch("b", &g));
  EXPECT_FALSE(g.has_value());  // the group took no part
  EXPECT_TRUE(alt->top_level_alternation());
}

}  // namespace
}  // namespace loom
