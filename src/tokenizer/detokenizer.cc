// Streaming detokenizer: windowed double decode, emit the stable suffix.
#include "tokenizer/detokenizer.h"

#include <algorithm>
#include <optional>
#include <span>

namespace loom::tokenizer {

namespace {

bool EndsWithReplacement(const std::string& s) {
  return s.size() >= 3 && s.compare(s.size() - 3, 3, "\xEF\xBF\xBD") == 0;
}

// "<0xNN>": ByteFallback decodes a run of these as a whole, and a run that turns out invalid
// becomes one U+FFFD per byte — including bytes that were valid on their own. So text is held
// until the run ends.
bool IsByteToken(const std::string* token) {
  return token != nullptr && token->size() == 6 && token->compare(0, 3, "<0x") == 0 &&
         (*token)[5] == '>';
}

}  // namespace

void StreamingDetokenizer::Prime(std::span<const int32_t> prompt) {
  if (!ids_.empty()) return;  // only before the first Add
  const size_t n = prompt.size();
  // vLLM: range(4, min(len + 1, 24)), or the whole prompt of at most 4.
  const size_t shortest = n <= 4 ? n : 4, longest = n <= 4 ? n : std::min<size_t>(n, 23);
  for (size_t len = shortest; len >= 1 && len <= longest; ++len) {
    std::vector<int32_t> window;
    for (int32_t id : prompt.subspan(n - len)) {
      if (!(skip_special_tokens_ && tokenizer_->IsSpecial(id))) window.push_back(id);
    }
    std::string text = tokenizer_->Decode(window, false);
    if (text.find("\xEF\xBF\xBD") != std::string::npos) continue;
    primed_ids_ = window.size();
    prefix_offset_ = 0;
    read_offset_ = primed_ids_;
    ids_ = std::move(window);
    primed_text_ = std::move(text);
    return;
  }
}

std::string StreamingDetokenizer::Add(int32_t id) {
  // Decode() drops special tokens when skipping, so dropping them here gives the same text.
  if (skip_special_tokens_ && tokenizer_->IsSpecial(id)) return "";
  ids_.push_back(id);
  if (IsByteToken(tokenizer_->IdToToken(id))) return "";
  const size_t pending = ids_.size() - read_offset_;
  if (pending < next_try_) return "";
  std::optional<std::string> delta = WindowDelta();
  if (!delta) {
    if (pending >= kEagerPending) next_try_ = 2 * pending;
    return "";
  }
  next_try_ = 0;
  prefix_offset_ = read_offset_;
  read_offset_ = ids_.size();
  emitted_bytes_ += delta->size();
  return std::move(*delta);
}

std::optional<std::string> StreamingDetokenizer::WindowDelta() const {
  const std::span<const int32_t> all(ids_);
  const std::string prefix_text =
      tokenizer_->Decode(all.subspan(prefix_offset_, read_offset_ - prefix_offset_), false);
  const std::string new_text = tokenizer_->Decode(all.subspan(prefix_offset_), false);
  // Text ending in U+FFFD is an unfinished character (a later id may complete it): not final,
  // as HF's DecodeStream (and vLLM) hold it.
  if (new_text.size() <= prefix_text.size() || EndsWithReplacement(new_text) ||
      new_text.compare(0, prefix_text.size(), prefix_text) != 0) {
    return std::nullopt;
  }
  return new_text.substr(prefix_text.size());
}

std::string StreamingDetokenizer::Peek() const {
  if (read_offset_ >= ids_.size() || ids_.size() - read_offset_ > kPeekMax) return "";
  return WindowDelta().value_or("");
}

std::string StreamingDetokenizer::Finish() {
  // The whole decode is the reference; everything emitted so far is a prefix of what it adds to
  // the prompt window's text.
  std::string full = tokenizer_->Decode(ids_, false);
  size_t skip = 0;
  if (full.compare(0, primed_text_.size(), primed_text_) == 0) {
    skip = primed_text_.size();
  } else {  // a decoder whose output for the window changed with what followed: the ids alone
    full = tokenizer_->Decode(std::span<const int32_t>(ids_).subspan(primed_ids_), false);
  }
  skip += emitted_bytes_;
  std::string rest = skip <= full.size() ? full.substr(skip) : std::string();
  emitted_bytes_ += rest.size();
  prefix_offset_ = read_offset_ = ids_.size();
  next_try_ = 0;
  return rest;
}

}  // namespace loom::tokenizer
