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
    max_len_ = std::max(max_len_, p.size());
    int32_t node = 0;
    for (auto it = p.rbegin(); it != p.rend(); ++it) {
      const auto c = static_cast<unsigned char>(*it);
      auto& children = nodes_[node].children;
      auto child =
          std::lower_bound(children.begin(), children.end(), std::make_pair(c, int32_t{-1}));
      if (child != children.end() && child->first == c) {
        node = child->second;
      } else {
        const auto id = static_cast<int32_t>(nodes_.size());
        const int32_t depth = nodes_[node].depth + 1;
        children.insert(child, {c, id});
        nodes_.emplace_back();
        nodes_.back().depth = depth;
        node = id;
      }
    }
    if (nodes_[node].token < 0) nodes_[node].token = static_cast<int32_t>(i);
  }
  // Failure links breadth first (a node's fail is shallower, so it is done before the node).
  std::vector<int32_t> queue = {0};
  for (size_t q = 0; q < queue.size(); ++q) {
    const int32_t node = queue[q];
    Node& n = nodes_[node];
    n.terminal = n.token >= 0 ? node : (node == 0 ? -1 : nodes_[n.fail].terminal);
    for (const auto& [c, child] : nodes_[node].children) {
      int32_t f = nodes_[node].fail;
      int32_t next = 0;
      if (node != 0) {
        while (true) {
          next = Child(f, c);
          if (next >= 0 || f == 0) break;
          f = nodes_[f].fail;
        }
        if (next < 0) next = 0;
      }
      nodes_[child].fail = next;
      queue.push_back(child);
    }
  }
}

int32_t AddedTokenMatcher::Child(int32_t node, uint8_t c) const {
  const auto& children = nodes_[node].children;
  auto it = std::lower_bound(children.begin(), children.end(), std::make_pair(c, int32_t{-1}));
  return it != children.end() && it->first == c ? it->second : -1;
}

void AddedTokenMatcher::LongestFrom(std::string_view text, size_t begin, size_t end,
                                    std::vector<int32_t>* len,
                                    std::vector<int32_t>* index) const {
  len->assign(end - begin, 0);
  index->assign(end - begin, -1);
  // A pattern starting before `end` ends at most max_len_ bytes later: scanning backwards from
  // there, the automaton state at position i is the longest reversed-pattern prefix that reads
  // text[i, ...) forwards, so its terminal is the longest pattern starting at i.
  const size_t stop = std::min(text.size(), end + max_len_);
  int32_t state = 0;
  for (size_t i = stop; i-- > begin;) {
    const auto c = static_cast<uint8_t>(text[i]);
    while (true) {
      const int32_t next = Child(state, c);
      if (next >= 0) {
        state = next;
        break;
      }
      if (state == 0) break;
      state = nodes_[state].fail;
    }
    if (i >= end) continue;
    const int32_t t = nodes_[state].terminal;
    if (t >= 0) {
      (*len)[i - begin] = nodes_[t].depth;
      (*index)[i - begin] = nodes_[t].token;
    }
  }
}

void AddedTokenMatcher::Split(std::string_view text, std::vector<TextSegment>* out) const {
  size_t start_offset = 0;
  size_t pos = 0;
  // Longest matches for text[block_begin, block_end), recomputed when pos leaves the block. A
  // block is at least as long as the longest pattern, so the rescan past its end keeps the total
  // work linear.
  const size_t block = std::max<size_t>(size_t{1} << 16, max_len_);
  size_t block_begin = 0, block_end = 0;
  std::vector<int32_t> lengths, indices;
  while (!empty() && pos < text.size()) {
    if (pos >= block_end) {
      block_begin = pos;
      block_end = std::min(text.size(), pos + block);
      LongestFrom(text, block_begin, block_end, &lengths, &indices);
    }
    const int32_t index = indices[pos - block_begin];
    if (index < 0) {
      ++pos;
      continue;
    }
    size_t stop = pos + static_cast<size_t>(lengths[pos - block_begin]);
    size_t start = pos;
    pos = stop;  // the next search starts after this match, kept or not
    const AddedToken& token = (*tokens_)[index];
    if (token.single_word) {
      const bool start_space = start == 0 || !IsWordChar(LastChar(text.substr(0, start)));
      size_t p = stop;
      const bool stop_space = stop == text.size() || !IsWordChar(NextCodePoint(text, &p));
      if (!start_space || !stop_space) continue;
    }
    if (token.lstrip) {
      size_t s = start;
      while (s > start_offset) {  // the strip never reaches before the previous match
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
