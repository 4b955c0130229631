// The time the chat-template references pin strftime_now to (tools/ref: FIXED_NOW), for tests that
// render templates.
#pragma once

#include <ctime>

namespace loom {

// 2024-07-26 13:45:00 UTC, with the weekday and day of the year filled in.
inline std::tm FixedNow() {
  std::tm t{};
  t.tm_year = 2024 - 1900;
  t.tm_mon = 6;
  t.tm_mday = 26;
  t.tm_hour = 13;
  t.tm_min = 45;
  time_t secs = timegm(&t);
  gmtime_r(&secs, &t);
  return t;
}

}  // namespace loom
