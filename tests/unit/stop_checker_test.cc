// StopChecker: stop strings across pieces, hold-back of possible prefixes, include_stop.
#include <gtest/gtest.h>

#include "engine/stop_checker.h"

namespace loom {
namespace {

std::string Feed(StopChecker& c, const std::vector<std::string>& pieces, std::string* matched) {
  std::string out;
  for (const auto& p : pieces) {
    out += c.Add(p, matched);
    if (!matched->empty()) return out;
  }
  return out + c.Flush();
}

TEST(StopChecker, StopSpanningPiecesIsCutAndNotReturned) {
  StopChecker c({"END"}, false);
  std::string m;
  EXPECT_EQ(Feed(c, {"hello E", "N", "D tail"}, &m), "hello ");
  EXPECT_EQ(m, "END");
}

TEST(StopChecker, HoldsBackOnlyWhatCouldStartAStop) {
  StopChecker c({"\n\nUser:"}, false);
  std::string m;
  EXPECT_EQ(c.Add("abc\n", &m), "abc");  // "\n" may start the stop
  EXPECT_EQ(c.Add("x", &m), "\nx");      // it did not
  EXPECT_EQ(c.Add("\n\nUse", &m), "");
  EXPECT_EQ(c.Add("d", &m), "\n\nUsed");
  EXPECT_TRUE(m.empty());
}

TEST(StopChecker, EarliestOfSeveralAndIncludeStop) {
  StopChecker c({"bb", "abc"}, true);
  std::string m;
  EXPECT_EQ(Feed(c, {"xxab", "cbb"}, &m), "xxabc");
  EXPECT_EQ(m, "abc");
  EXPECT_EQ(c.text(), "xxabc");
}

// Of several stop strings completed by one piece, the one that ends first wins, ties in list
// order, as vLLM 0.32's check_stop_strings (what one character at a time would find): "b" ends
// before "abc" although "abc" starts first.
TEST(StopChecker, TheStopThatEndsFirstWinsTiesInListOrder) {
  {
    StopChecker c({"abc", "b"}, false);
    std::string m;
    EXPECT_EQ(Feed(c, {"xxabcd"}, &m), "xxa");
    EXPECT_EQ(m, "b");
  }
  {
    StopChecker c({"bc", "abc", "c"}, true);  // all three end at the same character
    std::string m;
    EXPECT_EQ(Feed(c, {"x", "abcd"}, &m), "xabc");
    EXPECT_EQ(m, "bc");
  }
  {
    StopChecker c({"c", "bc"}, false);
    std::string m;
    EXPECT_EQ(Feed(c, {"xab", "cd"}, &m), "xab");
    EXPECT_EQ(m, "c");
  }
}

// With the stop string returned, vLLM holds nothing back (stop_buffer_length 0): every piece is
// final at once, and a stop string spanning pieces still ends the text where it ends.
TEST(StopChecker, IncludeStopHoldsNothingBack) {
  StopChecker c({"END", "\n\nUser:"}, true);
  std::string m;
  EXPECT_EQ(c.Add("hello E", &m), "hello E");
  EXPECT_EQ(c.Add("N", &m), "N");
  EXPECT_TRUE(m.empty());
  EXPECT_EQ(c.Add("D tail", &m), "D");
  EXPECT_EQ(m, "END");
  EXPECT_EQ(c.text(), "hello END");
  EXPECT_EQ(c.Flush(), "");
  StopChecker d({"\n\nUser:"}, true);
  EXPECT_EQ(d.Add("a\n", &m), "a\n");
  EXPECT_EQ(d.Add("\nUs", &m), "\nUs");
  EXPECT_TRUE(d.WouldMatch("er:"));
  EXPECT_EQ(d.Add("er: more", &m), "er:");
  EXPECT_EQ(m, "\n\nUser:");
  EXPECT_EQ(d.text(), "a\n\nUser:");
  StopChecker e({"xyz"}, true);  // a long text keeps only a short search context
  EXPECT_EQ(e.Add(std::string(1000, 'a') + "x", &m), std::string(1000, 'a') + "x");
  EXPECT_EQ(e.Add("yzq", &m), "yz");
  EXPECT_EQ(m, "xyz");
}

TEST(StopChecker, FlushReleasesAHeldPrefix) {
  StopChecker c({"STOP"}, false);
  std::string m;
  EXPECT_EQ(c.Add("go ST", &m), "go ");
  EXPECT_EQ(c.Flush(), "ST");
  EXPECT_EQ(c.text(), "go ST");
}

// min_tokens (check = false): a stop string inside the unchecked text is not matched, and one
// completed there is not matched later either (vLLM searches only what ends in the new text);
// one that starts there and ends in a checked piece is, and cuts the held-back text.
TEST(StopChecker, UncheckedPiecesMatchNothingButStillHoldBack) {
  StopChecker c({"ab", "abc"}, false);
  std::string m;
  EXPECT_EQ(c.Add("x ab y", &m, false), "x ab y");
  EXPECT_EQ(m, "");
  EXPECT_EQ(c.Add("ab", &m, false), "");  // "ab" could start "abc": held
  EXPECT_EQ(m, "");
  EXPECT_EQ(c.Add("d", &m, true), "abd");  // "ab" completed while unchecked: not a match now
  EXPECT_EQ(m, "");
  StopChecker d({"STOP"}, false);
  EXPECT_EQ(d.Add("go ST", &m, false), "go ");
  EXPECT_EQ(d.Add("OP and on", &m, true), "");
  EXPECT_EQ(m, "STOP");
  EXPECT_EQ(d.text(), "go ");
}

TEST(StopChecker, NoStopsPassesThrough) {
  StopChecker c;
  std::string m;
  EXPECT_EQ(c.Add("a", &m), "a");
  EXPECT_EQ(c.Add("", &m), "");
  EXPECT_EQ(c.Flush(), "");
}

}  // namespace
}  // namespace loom
