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

TEST(StopChecker, FlushReleasesAHeldPrefix) {
  StopChecker c({"STOP"}, false);
  std::string m;
  EXPECT_EQ(c.Add("go ST", &m), "go ");
  EXPECT_EQ(c.Flush(), "ST");
  EXPECT_EQ(c.text(), "go ST");
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
