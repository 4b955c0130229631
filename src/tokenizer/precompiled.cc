// Precompiled charsmap: darts-clone common-prefix search and the per-grapheme rewrite of
// HF's spm_precompiled; base64 for tokenizer.json's "precompiled_charsmap".
#include "tokenizer/precompiled.h"

#include <utf8proc.h>

#include "tokenizer/unicode.h"

namespace loom::tokenizer {

StatusOr<PrecompiledCharsmap> PrecompiledCharsmap::Parse(std::string_view bytes,
                                                         const std::string& what) {
  if (bytes.size() < 4) {
    return InvalidArgument(what + ": precompiled_charsmap has " + std::to_string(bytes.size()) +
                           " bytes (at least 4: the trie size)");
  }
  uint32_t trie_bytes = 0;
  for (int i = 0; i < 4; ++i)
    trie_bytes |= static_cast<uint32_t>(static_cast<uint8_t>(bytes[i])) << (8 * i);
  if (trie_bytes > bytes.size() - 4) {
    return InvalidArgument(what + ": precompiled_charsmap trie of " + std::to_string(trie_bytes) +
                           " bytes runs past the end (" + std::to_string(bytes.size() - 4) +
                           " bytes left)");
  }
  PrecompiledCharsmap m;
  m.trie_.resize(trie_bytes / 4);
  for (size_t i = 0; i < m.trie_.size(); ++i) {
    uint32_t u = 0;
    for (int k = 0; k < 4; ++k) {
      u |= static_cast<uint32_t>(static_cast<uint8_t>(bytes[4 + 4 * i + k])) << (8 * k);
    }
    m.trie_[i] = u;
  }
  m.normalized_.assign(bytes.substr(4 + trie_bytes));
  if (!IsValidUtf8(m.normalized_)) {
    return InvalidArgument(what + ": precompiled_charsmap outputs are not valid UTF-8");
  }
  return m;
}

std::optional<std::string_view> PrecompiledCharsmap::Transform(std::string_view chunk) const {
  // darts-clone unit: label = bits 0-7 and 31, has_leaf = bit 8, offset = bits 10-31 shifted
  // left by 8 when bit 9 is set, value = bits 0-30.
  auto offset = [](uint32_t unit) { return (unit >> 10) << ((unit & (1u << 9)) >> 6); };
  if (trie_.empty()) return std::nullopt;
  size_t node = offset(trie_[0]);
  for (unsigned char c : chunk) {
    if (c == 0) break;
    node ^= c;
    if (node >= trie_.size()) return std::nullopt;
    const uint32_t unit = trie_[node];
    if ((unit & ((1u << 31) | 0xFF)) != c) return std::nullopt;
    node ^= offset(unit);
    if (node >= trie_.size()) return std::nullopt;
    if ((unit >> 8) & 1) {  // the shortest match is the one used
      const size_t index = trie_[node] & ((1u << 31) - 1);
      if (index >= normalized_.size()) return std::nullopt;
      if ((static_cast<uint8_t>(normalized_[index]) & 0xC0) == 0x80) return std::nullopt;
      size_t end = normalized_.find('\0', index);
      if (end == std::string::npos) end = normalized_.size();
      return std::string_view(normalized_).substr(index, end - index);
    }
  }
  return std::nullopt;
}

namespace {

// The end of the extended grapheme cluster that starts at `pos` (< text.size()).
size_t GraphemeEnd(std::string_view text, size_t pos) {
  size_t end = pos;
  utf8proc_int32_t state = 0;
  char32_t prev = NextCodePoint(text, &end);
  while (end < text.size()) {
    size_t next = end;
    const char32_t cp = NextCodePoint(text, &next);
    if (utf8proc_grapheme_break_stateful(static_cast<utf8proc_int32_t>(prev),
                                         static_cast<utf8proc_int32_t>(cp), &state)) {
      break;
    }
    prev = cp;
    end = next;
  }
  return end;
}

size_t CountCodePoints(std::string_view s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

}  // namespace

template <typename Piece, typename Done>
void PrecompiledCharsmap::Walk(std::string_view text, Piece piece, Done done) const {
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t end = GraphemeEnd(text, pos);
    const std::string_view grapheme = text.substr(pos, end - pos);
    std::optional<std::string_view> whole;
    if (grapheme.size() < 6) whole = Transform(grapheme);
    if (whole) {
      piece(grapheme, whole);
    } else {
      size_t p = 0;
      while (p < grapheme.size()) {
        const size_t start = p;
        NextCodePoint(grapheme, &p);
        const std::string_view ch = grapheme.substr(start, p - start);
        piece(ch, Transform(ch));
      }
    }
    pos = end;
    if (!done(pos)) return;
  }
}

StatusOr<std::string> PrecompiledCharsmap::Apply(std::string_view text, size_t max_bytes) const {
  std::string out;
  out.reserve(text.size());
  bool over = false;
  Walk(
      text,
      [&](std::string_view old_part, std::optional<std::string_view> rewrite) {
        out += rewrite ? *rewrite : old_part;
      },
      [&](size_t) { return !(over = out.size() > max_bytes); });
  if (over) {
    return ResourceExhausted("normalizer Precompiled: output exceeds the limit of " +
                             std::to_string(max_bytes) + " bytes");
  }
  return out;
}

size_t PrecompiledCharsmap::HeadAfterApply(std::string_view text, size_t head) const {
  if (head == 0) return 0;
  // HF's list of (output character bytes, change) as spm_precompiled's `replace` builds it.
  struct Entry {
    size_t bytes;
    int64_t change;
  };
  std::vector<Entry> list;
  size_t unrecorded = 0;  // input bytes removed before the list had an entry
  auto replace = [&](std::string_view old_part, std::string_view new_part) {
    const int64_t diff = static_cast<int64_t>(CountCodePoints(new_part)) -
                         static_cast<int64_t>(CountCodePoints(old_part));
    for (size_t p = 0; p < new_part.size();) {
      const size_t start = p;
      NextCodePoint(new_part, &p);
      list.push_back({p - start, 0});
    }
    if (diff > 0) {
      for (size_t i = 0; i < static_cast<size_t>(diff); ++i) list[list.size() - 1 - i].change = 1;
    } else if (diff < 0) {
      if (list.empty()) {
        unrecorded += old_part.size();
      } else {
        list.back().change += diff;
      }
    }
  };
  // The list up to one grapheme past where its replay passes the head (the next grapheme's
  // removal may still change the last entry).
  bool past = false;
  Walk(
      text,
      [&](std::string_view old_part, std::optional<std::string_view> rewrite) {
        if (rewrite) {
          replace(old_part, *rewrite);
        } else {
          list.push_back({old_part.size(), 0});
        }
      },
      [&](size_t pos) {
        if (past) return false;
        past = pos > head + unrecorded;
        return true;
      });
  // Replay NormalizedString::transform: an entry with change <= 0 takes the alignment of the
  // input byte at `offset` and consumes 1 - change characters; an inserted one (change > 0)
  // takes the alignment of the byte before `offset` ((0, 0) at 0). Input bytes before `head`
  // are tied to offset 0. The consumed characters are counted from the input's start, so
  // removed first characters (unrecorded) shift everything after them back.
  size_t offset = 0, in = 0, out_head = 0;
  for (const Entry& e : list) {
    const bool tied = e.change > 0 ? offset <= head : offset < head;
    if (!tied) break;
    out_head += e.bytes;
    if (e.change <= 0) {
      for (int64_t k = 0; k < 1 - e.change && in < text.size(); ++k) {
        const size_t start = in;
        NextCodePoint(text, &in);
        offset += in - start;
      }
    }
  }
  return out_head;
}

StatusOr<std::string> DecodeBase64(std::string_view text, const std::string& what) {
  auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  while (!text.empty() && text.back() == '=') text.remove_suffix(1);
  std::string out;
  out.reserve(text.size() * 3 / 4);
  uint32_t acc = 0;
  int bits = 0;
  for (char c : text) {
    const int v = value(c);
    if (v < 0)
      return InvalidArgument(what + ": not base64 (character '" + std::string(1, c) + "')");
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += static_cast<char>((acc >> bits) & 0xFF);
    }
  }
  if (bits >= 6) return InvalidArgument(what + ": base64 of a bad length");
  return out;
}

}  // namespace loom::tokenizer
