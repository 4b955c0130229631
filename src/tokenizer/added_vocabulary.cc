// Added-token matching: a byte trie scanned leftmost-longest, then HF's strip / single-word rules.
#include "tokenizer/added_vocabulary.h"

#include <algorithm>

#include "tokenizer/unicode.h"

namespace loom::tokenizer {

namespace {

// Last character of s (valid UTF-8), or 0 when empty.
char32_t LastChar(std::string_view s) {
  if (s.empty()) return 0;
  size_t start = s.size() - 1;
  while (start > 0 && (static_cast<uint8_t>(s[start]) & 0xC0) == 0x80) --start;
  return NextCodePoint(s, &start);
}

}  // namespace

AddedTokenMatcher::AddedTokenMatcher(const std::vector<AddedToken>* tokens,
                                     std::vector<std::string> patterns)
    : tokens_(tokens), nodes_(1) {
  for (size_t i = 0; i < patterns.size(); ++i) {
    const std::string& p = patterns[i];
    if (p.empty()) continue;
    int32_t node = 0;
    for (unsigned char c : p) {
      auto& children = nodes_[node].children;
      auto it = std::lower_bound(children.begin(), children.end(), std::make_pair(c, int32_t{-1}));
      if (it != children.end() && it->first == c) {
        node = it->second;
      } else {
        const auto child = static_cast<int32_t>(nodes_.size());
        children.insert(it, {c, child});
        nodes_.emplace_back();
        node = child;
      }
    }
    if (nodes_[node].token < 0) nodes_[node].token = static_cast<int32_t>(i);
    first_byte_[static_cast<unsigned char>(p[0])] = true;
  }
}

int32_t AddedTokenMatcher::LongestAt(std::string_view text, size_t pos, size_t* end) const {
  int32_t node = 0, best = -1;
  for (size_t i = pos; i < text.size(); ++i) {
    const auto& children = nodes_[node].children;
    const auto c = static_cast<unsigned char>(text[i]);
    auto it = std::lower_bound(children.begin(), children.end(), std::make_pair(c, int32_t{-1}));
    if (it == children.end() || it->first != c) break;
    node = it->second;
    if (nodes_[node].token >= 0) {
      best = nodes_[node].token;
      *end = i + 1;
    }
  }
  return best;
}

void AddedTokenMatcher::Split(std::string_view text, std::vector<TextSegment>* out) const {
  size_t start_offset = 0;
  size_t pos = 0;
  while (!empty() && pos < text.size()) {
    if (!first_byte_[static_cast<unsigned char>(text[pos])]) {
      ++pos;
      continue;
    }
    size_t stop = 0;
    const int32_t index = LongestAt(text, pos, &stop);
    if (index < 0) {
      ++pos;
      continue;
    }
    size_t start = pos;
    pos = stop;  // the next search starts after this match, kept or not
    const AddedToken& token = (*tokens_)[index];
    if (token.single_word) {
      const bool start_space = start == 0 || !IsAlphanumeric(LastChar(text.substr(0, start)));
      size_t p = stop;
      const bool stop_space = stop == text.size() || !IsAlphanumeric(NextCodePoint(text, &p));
      if (!start_space || !stop_space) continue;
    }
    if (token.lstrip) {
      size_t s = start;
      while (s > 0) {
        size_t c = s - 1;
        while (c > 0 && (static_cast<uint8_t>(text[c]) & 0xC0) == 0x80) --c;
        size_t tmp = c;
        if (!IsWhitespace(NextCodePoint(text, &tmp))) break;
        s = c;
      }
      start = std::max(s, start_offset);
    }
    if (token.rstrip) {
      while (stop < text.size()) {
        size_t next = stop;
        if (!IsWhitespace(NextCodePoint(text, &next))) break;
        stop = next;
      }
    }
    if (start_offset < start) out->push_back({start_offset, start, -1});
    out->push_back({start, stop, token.id});
    start_offset = stop;  // the search itself goes on from the match's own end, as in HF
  }
  if (start_offset != text.size()) out->push_back({start_offset, text.size(), -1});
}

}  // namespace loom::tokenizer
