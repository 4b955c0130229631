// Streaming detokenizer: windowed double decode, emit the stable suffix.
#include "tokenizer/detokenizer.h"

#include <span>

namespace loom::tokenizer {

namespace {

bool EndsWithReplacement(const std::string& s) {
  return s.size() >= 3 && s.compare(s.size() - 3, 3, "\xEF\xBF\xBD") == 0;
}

// "<0xXX>": ByteFallback decodes a run of these as a whole, and a run that turns out invalid
// becomes one U+FFFD per byte — including bytes that were valid on their own. So text is held
// until the run ends.
bool IsByteToken(const std::string* token) {
  return token != nullptr && token->size() == 6 && token->compare(0, 3, "<0x") == 0 &&
         (*token)[5] == '>';
}

}  // namespace

std::string StreamingDetokenizer::Add(int32_t id) {
  // Decode() drops special tokens when skipping, so dropping them here gives the same text.
  if (skip_special_tokens_ && tokenizer_->IsSpecial(id)) return "";
  ids_.push_back(id);
  if (IsByteToken(tokenizer_->IdToToken(id))) return "";
  const size_t pending = ids_.size() - read_offset_;
  if (pending < next_try_) return "";
  const std::span<const int32_t> all(ids_);
  const std::string prefix_text =
      tokenizer_->Decode(all.subspan(prefix_offset_, read_offset_ - prefix_offset_), false);
  const std::string new_text = tokenizer_->Decode(all.subspan(prefix_offset_), false);
  if (new_text.size() <= prefix_text.size() || EndsWithReplacement(new_text) ||
      new_text.compare(0, prefix_text.size(), prefix_text) != 0) {
    if (pending >= kEagerPending) next_try_ = 2 * pending;
    return "";
  }
  next_try_ = 0;
  prefix_offset_ = read_offset_;
  read_offset_ = ids_.size();
  std::string delta = new_text.substr(prefix_text.size());
  emitted_bytes_ += delta.size();
  return delta;
}

std::string StreamingDetokenizer::Finish() {
  // The whole decode is the reference; everything emitted so far is a prefix of it.
  const std::string full = tokenizer_->Decode(ids_, false);
  std::string rest = emitted_bytes_ <= full.size() ? full.substr(emitted_bytes_) : std::string();
  emitted_bytes_ += rest.size();
  prefix_offset_ = read_offset_ = ids_.size();
  next_try_ = 0;
  return rest;
}

}  // namespace loom::tokenizer
