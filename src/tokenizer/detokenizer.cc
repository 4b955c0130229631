// Streaming detokenizer: HF DecodeStream's windowed double decode, reset as vLLM resets it.
#include "tokenizer/detokenizer.h"

#include <algorithm>
#include <span>

namespace loom::tokenizer {

namespace {

bool EndsWithReplacement(const std::string& s) {
  return s.size() >= 3 && s.compare(s.size() - 3, 3, "\xEF\xBF\xBD") == 0;
}

bool StartsWith(const std::string& s, const std::string& prefix) {
  return s.compare(0, prefix.size(), prefix) == 0;
}

}  // namespace

void StreamingDetokenizer::Prime(std::span<const int32_t> prompt) {
  if (!ids_.empty() || !prefix_.empty()) return;  // only before the first Add
  const size_t n = prompt.size();
  std::span<const int32_t> suffix = prompt;
  // vLLM: range(4, min(len + 1, 24)), checked with Tokenizer.decode's default (specials skipped).
  for (size_t len = 4; n > 4 && len <= std::min<size_t>(n, 23); ++len) {
    std::vector<int32_t> window;
    for (int32_t id : prompt.subspan(n - len)) {
      if (!tokenizer_->IsSpecial(id)) window.push_back(id);
    }
    if (tokenizer_->Decode(window, false).find("\xEF\xBF\xBD") == std::string::npos) {
      suffix = prompt.subspan(n - len);
      break;
    }
  }
  for (int32_t id : suffix) Add(id);
}

std::string StreamingDetokenizer::Add(int32_t id) {
  // Decode() drops special tokens when skipping, so dropping them here gives the same text.
  if (skip_special_tokens_ && tokenizer_->IsSpecial(id)) return "";
  const size_t held = ids_.size() + 1 - prefix_ids_;
  if (held < next_try_) {  // not stepped: Step takes these ids in with the next one
    ids_.push_back(id);
    return "";
  }
  std::string piece = Step(id);
  const size_t now_held = ids_.size() - prefix_ids_;
  next_try_ = now_held >= kEagerPending ? 2 * now_held : 0;
  return piece;
}

std::string StreamingDetokenizer::Step(int32_t id) {
  const size_t unstepped = stepped_;  // ids_[unstepped..) came in without a step (the throttle)
  // DecodeStream: an empty prefix is recomputed from the window first. Stepped one by one, a
  // window whose text is empty is all it can take in (a clean non-empty text was emitted at its
  // last step); ids the throttle let in are never taken in so (their text was not emitted).
  if (prefix_.empty() && unstepped == ids_.size() && !ids_.empty() &&
      tokenizer_->Decode(ids_, false).empty()) {
    prefix_ids_ = ids_.size();
  }
  ids_.push_back(id);
  stepped_ = ids_.size();
  std::string text = tokenizer_->Decode(ids_, false);
  if (text.size() <= prefix_.size() || EndsWithReplacement(text)) return "";
  if (!StartsWith(text, prefix_)) {
    // DecodeStream's "invalid prefix": vLLM drops the stream and steps this id into a fresh one
    // (the window's held ids, which turned the emitted text invalid, are never emitted). Ids
    // the throttle let in without a step go into the fresh stream too, so no text after them
    // is lost (vLLM, stepping each, would have reset at the first of them that is text: here
    // the garbage bytes before it come out as U+FFFD).
    ids_.erase(ids_.begin(), ids_.begin() + static_cast<std::ptrdiff_t>(unstepped));
    prefix_.clear();
    prefix_ids_ = 0;
    stepped_ = ids_.size();
    text = tokenizer_->Decode(ids_, false);
    if (text.empty() || EndsWithReplacement(text)) return "";
  }
  std::string piece = text.substr(prefix_.size());
  // The next window starts at this piece's first id.
  ids_.erase(ids_.begin(), ids_.begin() + static_cast<std::ptrdiff_t>(prefix_ids_));
  prefix_ = tokenizer_->Decode(ids_, false);
  prefix_ids_ = stepped_ = ids_.size();
  return piece;
}

std::string StreamingDetokenizer::Held() const {
  const std::string text = tokenizer_->Decode(ids_, false);
  if (StartsWith(text, prefix_)) return text.substr(prefix_.size());
  return tokenizer_->Decode(std::span<const int32_t>(ids_).subspan(prefix_ids_), false);
}

std::string StreamingDetokenizer::Peek() const {
  // Held ids that were all stepped hold an unfinished character (else the step released them):
  // only ids the throttle let in can hold whole characters — no decode on every held token.
  if (stepped_ == ids_.size() || ids_.size() - prefix_ids_ > kPeekMax) return "";
  std::string held = Held();
  return EndsWithReplacement(held) ? "" : held;
}

std::string StreamingDetokenizer::Finish() {
  if (prefix_ids_ >= ids_.size()) return "";
  std::string rest = Held();
  // Released: the window's text is the next prefix (ids added later continue it).
  prefix_ = tokenizer_->Decode(ids_, false);
  prefix_ids_ = stepped_ = ids_.size();
  next_try_ = 0;
  return rest;
}

}  // namespace loom::tokenizer
