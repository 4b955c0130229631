// Python re → PCRE2: escapes and [...] sets, as re/_parser.py reads them.
#include "base/py_regex_translator.h"

namespace loom::py_regex_detail {

// _escape: a backslash outside a class (already read at `at`).
Status Translator::Escape(size_t at, unsigned flags, Sequence* seq) {
  if (AtEnd()) return Error("bad escape (end of pattern)", at);
  const char32_t c = s_[pos_++];
  const bool ascii = (global_flags_ & kAscii) != 0;
  std::string anchor, item;
  if (c == 'A' || c == 'b') {
    anchor = std::string("\\") + static_cast<char>(c);
  } else if (c == 'B') {  // Python up to 3.13: never in an empty string (3.14 changed it)
    anchor = "(?!\\A\\z)\\B";
  } else if (c == 'Z') {  // the very end: PCRE2's \z (its \Z also allows a final newline)
    anchor = "\\z";
  } else if (c == 'd' || c == 'D' || c == 'w' || c == 'W') {
    item = std::string("\\") + static_cast<char>(c);  // with PCRE2_UCP, Python's own sets
  } else if (c == 's' || c == 'S') {
    item = ascii ? std::string("\\") + static_cast<char>(c)
                 : std::string(c == 's' ? "[" : "[^") + kPySpace + "]";
  }
  if (!anchor.empty() || !item.empty()) {
    const uint64_t width = item.empty() ? 0 : 1;
    Emit(anchor + item);
    seq->Push(anchor.empty() ? Last::kItem : Last::kAnchor, {width, width});
    return OkStatus();
  }
  if (c >= '1' && c <= '9') {  // octal escape *or* decimal group reference (re/_parser.py's "sigh")
    std::u32string digits(1, c);
    if (IsDigit(Peek())) {
      digits += s_[pos_++];
      if (IsOctal(digits[0]) && IsOctal(digits[1]) && IsOctal(Peek())) {
        digits += s_[pos_++];
        const uint64_t value = (digits[0] - '0') * 64 + (digits[1] - '0') * 8 + (digits[2] - '0');
        if (value > 0377) {
          return Error("octal escape value \\" + EncodeUtf8(digits) + " outside of range 0-0o377",
                       at);
        }
        EmitLiteral(static_cast<char32_t>(value), flags);
        seq->Push(Last::kItem, {1, 1});
        return OkStatus();
      }
    }
    const uint64_t gid = ParseDecimal(digits, 99);
    if (gid >= groups_.size())
      return Error("invalid group reference " + std::to_string(gid), at + 1);
    if (!Closed(gid)) return Error("cannot refer to an open group", at);
    RETURN_IF_ERROR(CheckLookbehindGroup(gid, at));
    return Backref(gid, seq);
  }
  char32_t value = 0;
  RETURN_IF_ERROR(CharacterEscape(c, at, /*in_class=*/false, &value));
  EmitLiteral(value, flags);
  seq->Push(Last::kItem, {1, 1});
  return OkStatus();
}

// The escapes that stand for one character, in a class and out (`c` follows the backslash).
Status Translator::CharacterEscape(char32_t c, size_t at, bool in_class, char32_t* value) {
  auto hex = [&](size_t n) -> StatusOr<char32_t> {
    const size_t from = pos_;
    while (pos_ - from < n && IsHex(Peek())) ++pos_;
    if (pos_ - from != n) return Error("incomplete escape " + Source(at, pos_), at);
    uint64_t v = 0;
    for (size_t i = from; i < pos_; ++i) {
      const char32_t d = s_[i];
      v = v * 16 + (IsDigit(d) ? d - '0' : (d | 0x20) - 'a' + 10);
    }
    if (v > 0x10ffff) return Error("bad escape " + Source(at, pos_), at);
    return static_cast<char32_t>(v);
  };
  // \v is one character in Python, and a class of them in PCRE2.
  static constexpr char kEscapes[] = "a\af\fn\nr\rt\tv\v\\\\";  // letter, character
  const char* simple = nullptr;
  for (const char* e = kEscapes; *e != 0 && simple == nullptr; e += 2) {
    if (c == static_cast<unsigned char>(e[0])) simple = e + 1;
  }
  if (simple != nullptr) {
    *value = static_cast<unsigned char>(*simple);
  } else if (c == 'x' || c == 'u' || c == 'U') {
    ASSIGN_OR_RETURN(*value, hex(c == 'x' ? 2 : c == 'u' ? 4 : 8));
  } else if (c == 'N') {
    if (!Match('{')) return Error("missing {", pos_);
    std::u32string name;
    RETURN_IF_ERROR(GetUntil('}', "character name", &name));
    return Error(
        "named Unicode escapes (" + Source(at, pos_) +
            ") are not supported by loom; write the character, or its \\u escape (\\u00e9)",
        at);
  } else if (c == '0' || (in_class && IsOctal(c))) {  // up to three octal digits in all
    uint64_t v = c - '0';
    for (int i = 0; i < 2 && IsOctal(Peek()); ++i) v = v * 8 + (s_[pos_++] - '0');
    if (v > 0377) {
      return Error("octal escape value " + Source(at, pos_) + " outside of range 0-0o377", at);
    }
    *value = static_cast<char32_t>(v);
  } else if (IsDigit(c) || IsAsciiLetter(c)) {
    // Every other ASCII letter is an error in Python (and a feature of PCRE2's: \p, \h, \K,
    // \Q, \R, \C, \k, \g, \z, \G, \X, \N, \e, \o, \c ...).
    return Error("bad escape " + Source(at, pos_), at);
  } else {
    *value = c;  // punctuation and any other character stand for themselves
  }
  if (*value >= 0xd800 && *value < 0xe000) {
    return Error("surrogate code point " + Source(at, pos_) +
                     " is not supported by loom (no UTF-8 name contains one)",
                 at);
  }
  return OkStatus();
}

// _class_escape: a backslash inside a class (already read at `at`): a literal or a category.
Status Translator::ClassEscape(size_t at, std::optional<char32_t>* literal, char* category) {
  if (AtEnd()) return Error("bad escape (end of pattern)", at);
  const char32_t c = s_[pos_++];
  if (c == 'd' || c == 'D' || c == 's' || c == 'S' || c == 'w' || c == 'W') {
    *category = static_cast<char>(c);
    return OkStatus();
  }
  char32_t value = 0;
  if (c == 'b') {
    value = 0x08;  // backspace in a class
  } else {
    RETURN_IF_ERROR(CharacterEscape(c, at, /*in_class=*/true, &value));
  }
  *literal = value;
  return OkStatus();
}

// A [...] set (the [ already read at `at`), as re/_parser.py reads it.
Status Translator::CharacterClass(size_t at, unsigned flags, Sequence* seq) {
  const bool ascii = (global_flags_ & kAscii) != 0;
  std::vector<std::pair<char32_t, char32_t>> ranges;
  std::string categories;
  bool space = false, not_space = false, any = false;
  const bool negate = Match('^');
  auto add = [&](const std::optional<char32_t>& literal, char category) {
    if (literal) {
      ranges.emplace_back(*literal, *literal);
    } else if (!ascii && category == 's') {
      space = true;
    } else if (!ascii && category == 'S') {
      not_space = true;
    } else {
      categories += std::string("\\") + category;
    }
  };
  while (true) {
    if (AtEnd()) return Error("unterminated character set", at);
    const size_t item = pos_;
    const char32_t c = s_[pos_++];
    if (c == ']' && any) break;  // a ] first is a literal
    std::optional<char32_t> lo;
    char lo_category = 0;
    if (c == '\\') {
      RETURN_IF_ERROR(ClassEscape(item, &lo, &lo_category));
    } else {
      lo = c;  // [ too: Python has no [:alpha:] classes
    }
    any = true;
    if (!Match('-')) {
      add(lo, lo_category);
      continue;
    }
    if (AtEnd()) return Error("unterminated character set", at);
    const size_t that = pos_;
    const char32_t d = s_[pos_++];
    if (d == ']') {  // [a-] : a and -
      add(lo, lo_category);
      add('-', 0);
      break;
    }
    std::optional<char32_t> hi;
    char hi_category = 0;
    if (d == '\\') {
      RETURN_IF_ERROR(ClassEscape(that, &hi, &hi_category));
    } else {
      hi = d;
    }
    if (!lo || !hi || *hi < *lo) return Error("bad character range " + Source(item, pos_), item);
    ranges.emplace_back(*lo, *hi);
  }
  std::string body;
  for (const auto& [lo, hi] : ranges)
    body += lo == hi ? Literal(lo) : Literal(lo) + "-" + Literal(hi);
  if (flags & kIgnoreCase) {  // a letter PCRE2 does not fold with one in the set: add it
    for (const auto& group : CaseGroups()) {
      const bool in = std::any_of(group.begin(), group.end(), [&](char32_t m) {
        return std::any_of(ranges.begin(), ranges.end(),
                           [&](const auto& r) { return r.first <= m && m <= r.second; });
      });
      if (in) {
        for (char32_t m : group) body += Literal(m);
      }
    }
  }
  body += categories;
  if (space) body += kPySpace;
  const std::string not_space_set = std::string("[^") + kPySpace + "]";
  if (!not_space) {
    Emit(std::string(negate ? "[^" : "[") + body + "]");
  } else if (!negate) {  // the set, or Python's non-space
    Emit(body.empty() ? not_space_set : "(?:[" + body + "]|" + not_space_set + ")");
  } else {  // neither the set nor a non-space: a space outside the set
    const std::string space_set = std::string("[") + kPySpace + "]";
    Emit(body.empty() ? space_set : "(?:(?![" + body + "])" + space_set + ")");
  }
  seq->Push(Last::kItem, {1, 1});
  return OkStatus();
}

}  // namespace loom::py_regex_detail
