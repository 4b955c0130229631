// StopChecker: finds stop strings in a sequence's growing text and holds back what could start one.
#pragma once

#include <string>
#include <vector>

namespace loom {

// As vLLM: a stop string may span several tokens; the text returned never contains it (unless
// include_stop is set) and never includes text after it. Thread-safety: one sequence, one thread.
class StopChecker {
 public:
  StopChecker() = default;
  StopChecker(std::vector<std::string> stops, bool include_stop);

  // Appends `delta` to the text. Returns the text that is now final (safe to send; with
  // include_stop all of `delta` up to the end of a stop string it completes, as vLLM holds
  // nothing back then). Sets
  // *matched to the stop string when one completed (the sequence must then finish): one that
  // ends inside `delta`. With `check` false (a token within min_tokens, as vLLM) nothing is
  // matched, and what could start a stop string is still held back: a stop string that begins
  // there and ends in a later checked delta is found.
  std::string Add(const std::string& delta, std::string* matched, bool check = true);
  // Whether Add(more) would complete a stop string (no state change).
  bool WouldMatch(const std::string& more) const;
  bool empty() const { return stops_.empty(); }
  // The held-back remainder, at the end of a sequence that did not stop on a string.
  std::string Flush();
  const std::string& text() const { return text_; }  // everything final so far

 private:
  std::vector<std::string> stops_;
  bool include_stop_ = false;
  size_t max_stop_ = 0;
  // Not yet final: may be the start of a stop string. With include_stop, the released text's
  // last max_stop_ - 1 bytes instead (final already; where a spanning stop string is sought).
  std::string pending_;
  std::string text_;
};

}  // namespace loom
