// Regex: Python re semantics for full and prefix matches, and the step limit on file-borne patterns.
#include "base/regex.h"

#include <gtest/gtest.h>

namespace loom {
namespace {

Regex MustCompile(const std::string& pattern) {
  auto r = Regex::Compile(pattern, "test pattern");
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return std::move(r).value();
}

// Nested repetition with no literal PCRE2 could check first: exponential backtracking on a
// module-like name that does not match.
const char kRunaway[] = "(?:[a-z_.0-9]+)+[XY]";
const char kName[] = "model.layers.11.self_attn.q_proj";

TEST(Regex, FullAndPrefixMatchAsPython) {
  const Regex r = MustCompile(R"(.*\.(q|v)_proj)");
  EXPECT_TRUE(r.FullMatch(kName));
  EXPECT_FALSE(r.FullMatch(std::string(kName) + ".lora_A"));
  EXPECT_TRUE(r.PrefixMatch(std::string(kName) + ".lora_A"));
  EXPECT_FALSE(MustCompile("layers").PrefixMatch(kName));  // re.match anchors at the start
}

TEST(Regex, ARunawayMatchIsNoMatchAndRecordedInTheInnermostScope) {
  const Regex r = MustCompile(kRunaway);
  EXPECT_FALSE(r.FullMatch(kName));  // no scope: counted as no match, nothing recorded
  RegexLimitScope outer;
  {
    RegexLimitScope inner;
    EXPECT_FALSE(r.PrefixMatch(kName));
    ASSERT_FALSE(inner.status().ok());
    EXPECT_NE(inner.status().message().find(std::string("test pattern: regular expression '") +
                                            kRunaway + "' took more than 100000 backtracking "
                                            "steps on '" + kName + "'"),
              std::string::npos)
        << inner.status().message();
  }
  EXPECT_TRUE(outer.status().ok()) << outer.status().ToString();
  EXPECT_TRUE(MustCompile("model.*").FullMatch(kName));  // an ordinary match records nothing
  EXPECT_TRUE(outer.status().ok());
  EXPECT_FALSE(r.FullMatch(kName));
  EXPECT_FALSE(outer.status().ok());
}

// After the first limit hit the scope's load fails anyway; later matches return at once instead
// of each spending the full limit (65,536 ignore patterns × every projection ran an hour).
TEST(Regex, AfterALimitHitLaterMatchesInTheScopeReturnAtOnce) {
  const Regex runaway = MustCompile(kRunaway);
  const Regex plain = MustCompile("model.*");
  RegexLimitScope scope;
  EXPECT_TRUE(plain.FullMatch(kName));
  EXPECT_FALSE(runaway.FullMatch(kName));
  ASSERT_FALSE(scope.status().ok());
  const std::string first = scope.status().message();
  EXPECT_FALSE(plain.FullMatch(kName));  // short-circuited: the scope has failed
  for (int i = 0; i < 10000; ++i) EXPECT_FALSE(runaway.FullMatch(kName));  // ~27 s if each ran
  EXPECT_EQ(scope.status().message(), first);  // the first hit is what is reported
  {
    RegexLimitScope inner;  // a fresh scope matches again
    EXPECT_TRUE(plain.FullMatch(kName));
  }
}

TEST(Regex, LongPatternsAndNamesAreClippedInTheMessage) {
  const std::string name(5000, 'a');
  RegexLimitScope scope;
  EXPECT_FALSE(MustCompile("(?:a+)+[XY]").FullMatch(name));
  ASSERT_FALSE(scope.status().ok());
  EXPECT_LT(scope.status().message().size(), 600u);
}

}  // namespace
}  // namespace loom
