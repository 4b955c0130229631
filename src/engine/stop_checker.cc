// StopChecker: incremental stop-string search with a minimal hold-back (none when the stop string
// is returned).
#include "engine/stop_checker.h"

#include <algorithm>

namespace loom {

StopChecker::StopChecker(std::vector<std::string> stops, bool include_stop)
    : include_stop_(include_stop) {
  for (auto& s : stops) {
    if (!s.empty()) stops_.push_back(std::move(s));
  }
  for (const auto& s : stops_) max_stop_ = std::max(max_stop_, s.size());
}

std::string StopChecker::Add(const std::string& delta, std::string* matched, bool check) {
  matched->clear();
  if (stops_.empty()) {
    text_ += delta;
    return delta;
  }
  const size_t before = pending_.size();
  pending_ += delta;
  // The complete stop string in pending that ends in `delta` and ends first, ties in list order
  // (vLLM's check_stop_strings: what appending one character at a time would find; "b" in
  // "abc" before "abc"). A stop can only start in pending: everything released before was
  // checked not to be a stop prefix; one that ended before `delta` was either matched then or
  // completed while unchecked.
  size_t best = std::string::npos;
  size_t best_end = std::string::npos;
  const std::string* best_stop = nullptr;
  for (const auto& s : stops_) {
    if (!check) break;
    const size_t from = before >= s.size() ? before - s.size() + 1 : 0;
    const size_t at = pending_.find(s, from);
    if (at != std::string::npos && at + s.size() < best_end) {
      best = at;
      best_end = at + s.size();
      best_stop = &s;
    }
  }
  if (include_stop_) {
    // As vLLM (no hold-back when the stop string is returned): `delta` is final at once, up to
    // the end of a stop string it completes; pending_ keeps the released text's last
    // max_stop_ - 1 bytes as the context a stop string spanning pieces is found in.
    std::string out = best_stop != nullptr ? pending_.substr(before, best_end - before) : delta;
    if (best_stop != nullptr) {
      *matched = *best_stop;
      pending_.clear();
    } else if (pending_.size() >= max_stop_) {
      pending_.erase(0, pending_.size() - (max_stop_ - 1));
    }
    text_ += out;
    return out;
  }
  if (best_stop != nullptr) {
    *matched = *best_stop;
    std::string out = pending_.substr(0, best);
    pending_.clear();
    text_ += out;
    return out;
  }
  // Hold back the longest suffix that is a proper prefix of some stop string. Stop strings
  // start on a character boundary, so the released part is whole UTF-8 characters.
  size_t hold = 0;
  const size_t limit = std::min(pending_.size(), max_stop_ - 1);
  for (size_t k = limit; k > 0; --k) {
    const std::string_view suffix(pending_.data() + pending_.size() - k, k);
    bool prefix = false;
    for (const auto& s : stops_) {
      if (s.size() > k && std::string_view(s).substr(0, k) == suffix) {
        prefix = true;
        break;
      }
    }
    if (prefix) {
      hold = k;
      break;
    }
  }
  std::string out = pending_.substr(0, pending_.size() - hold);
  pending_.erase(0, pending_.size() - hold);
  text_ += out;
  return out;
}

bool StopChecker::WouldMatch(const std::string& more) const {
  if (stops_.empty() || more.empty()) return false;
  const std::string probe = pending_ + more;
  for (const auto& s : stops_) {
    const size_t from = pending_.size() >= s.size() ? pending_.size() - s.size() + 1 : 0;
    if (probe.find(s, from) != std::string::npos) return true;
  }
  return false;
}

std::string StopChecker::Flush() {
  std::string out;
  out.swap(pending_);
  if (include_stop_) return "";  // already released: only the search context
  text_ += out;
  return out;
}

}  // namespace loom
