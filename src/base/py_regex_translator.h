// The Python-re → PCRE2 translator's parts shared by py_regex.cc and py_regex_escapes.cc.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "base/py_regex.h"
#include "base/status.h"
#include "base/utf8.h"

namespace loom::py_regex_detail {

constexpr uint64_t kMaxRepeat = 4294967295u;  // CPython's MAXREPEAT, which also means "no limit"
constexpr uint64_t kPcreMaxRepeat = 65535;    // PCRE2's largest {m,n} count
constexpr uint64_t kMaxGroups = 1073741823;   // CPython's MAXGROUPS
constexpr int kMaxNesting = 100;  // PCRE2 allows 250 parentheses deep; a lookaround emits two

enum Flag : unsigned {
  kIgnoreCase = 1,
  kMultiline = 2,
  kDotAll = 4,
  kVerbose = 8,
  kAscii = 16,
  kUnicode = 32,
  kLocale = 64,
  kTemplate = 128,
};
constexpr unsigned kTypeFlags = kAscii | kUnicode | kLocale;

inline unsigned FlagBit(char32_t c) {  // the inline flag letters, in the order of their bits
  static constexpr char kLetters[] = "imsxauLt";
  for (unsigned i = 0; kLetters[i] != 0; ++i) {
    if (c == static_cast<unsigned char>(kLetters[i])) return 1u << i;
  }
  return 0;
}

inline bool IsDigit(char32_t c) { return c >= '0' && c <= '9'; }  // Python's DIGITS: ASCII only
inline bool IsOctal(char32_t c) { return c >= '0' && c <= '7'; }
inline bool IsHex(char32_t c) {
  return IsDigit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}
inline bool IsAsciiLetter(char32_t c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
inline bool IsPyWhitespace(char32_t c) {  // re/_parser.py WHITESPACE, skipped in verbose mode
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

// Python's str.isspace(), which \s means in a str pattern. PCRE2's Unicode \s differs: it lacks
// U+001C..U+001F and has U+180E.
constexpr char kPySpace[] =
    "\\x{9}-\\x{d}\\x{1c}-\\x{20}\\x{85}\\x{a0}\\x{1680}\\x{2000}-\\x{200a}\\x{2028}\\x{2029}"
    "\\x{202f}\\x{205f}\\x{3000}";

// Letters Python's case-insensitive matching takes as one letter and PCRE2's does not (from
// comparing the two engines over every cased code point: Python's _sre lowercase and _casefix
// tables against PCRE2 10.42's case folding): I i İ ı, and three pairs of Greek and ligatures.
inline const std::vector<std::vector<char32_t>>& CaseGroups() {
  static const std::vector<std::vector<char32_t>> groups = {
      {0x49, 0x69, 0x130, 0x131}, {0x390, 0x1fd3}, {0x3b0, 0x1fe3}, {0xfb05, 0xfb06}};
  return groups;
}

inline std::string Hex(char32_t c) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "\\x{%x}", static_cast<unsigned>(c));
  return buf;
}

// One character as a PCRE2 literal, the same inside a class and outside.
inline std::string Literal(char32_t c) {
  if (IsDigit(c) || IsAsciiLetter(c) || c == '_') return std::string(1, static_cast<char>(c));
  if (c > 0x20 && c < 0x7f) return std::string("\\") + static_cast<char>(c);  // punctuation
  return Hex(c);
}

// (lo, hi) widths as re/_parser.py's getwidth() computes them (saturating at MAXREPEAT).
struct Width {
  uint64_t lo = 0;
  uint64_t hi = 0;
};
inline uint64_t AddWidth(uint64_t a, uint64_t b) { return std::min(a + b, kMaxRepeat); }
inline uint64_t MulWidth(uint64_t a, uint64_t b) {
  if (a == 0 || b == 0) return 0;
  return a > kMaxRepeat / b ? kMaxRepeat : std::min(a * b, kMaxRepeat);
}

// An ASCII decimal string as a number, saturating past `cap`.
inline uint64_t ParseDecimal(std::u32string_view digits, uint64_t cap) {
  uint64_t v = 0;
  for (char32_t d : digits) {
    v = v * 10 + (d - '0');
    if (v > cap) return cap + 1;
  }
  return v;
}

class Translator {
 public:
  Translator(std::u32string source, bool capture_group1)
      : s_(std::move(source)), capture_group1_(capture_group1) {}

  StatusOr<PcreTranslation> Run();

 private:
  // What the last item of a sequence is, for a following quantifier (re/_parser.py's checks).
  enum class Last { kNone, kAnchor, kRepeat, kItem };
  struct Sequence {  // one _parse() call's items
    Width before;    // the items before the last
    Width last;
    Last kind = Last::kNone;
    Width Total() const { return {AddWidth(before.lo, last.lo), AddWidth(before.hi, last.hi)}; }
    void Push(Last k, Width w) {
      before = Total();
      last = w;
      kind = k;
    }
  };
  // The output, with group numbers left open until every reference is known.
  struct Piece {
    enum Kind { kText, kOpenGroup, kBackref, kCondition } kind;
    std::string text;
    uint64_t group = 0;
  };

  bool AtEnd() const { return pos_ >= s_.size(); }
  char32_t Peek() const { return AtEnd() ? 0 : s_[pos_]; }
  bool Match(char32_t c) {
    if (AtEnd() || s_[pos_] != c) return false;
    ++pos_;
    return true;
  }
  Status Error(const std::string& what, size_t at) const {
    return InvalidArgument(what + " at position " + std::to_string(at));
  }
  std::string Source(size_t from, size_t to) const {
    return EncodeUtf8(std::u32string_view(s_).substr(from, to - from));
  }

  void Emit(const std::string& text) {
    if (!out_.empty() && out_.back().kind == Piece::kText) {
      out_.back().text += text;
    } else {
      out_.push_back({Piece::kText, text, 0});
    }
  }
  void EmitLiteral(char32_t c, unsigned flags) {
    if (flags & kIgnoreCase) {
      for (const auto& group : CaseGroups()) {
        if (std::find(group.begin(), group.end(), c) == group.end()) continue;
        std::string set = "[";
        for (char32_t m : group) set += Literal(m);
        Emit(set + "]");
        return;
      }
    }
    Emit(Literal(c));
  }
  bool Closed(uint64_t gid) const { return gid < groups_.size() && groups_[gid].has_value(); }

  Status Alternation(int nested, unsigned flags, bool verbose, Width* width);
  Status Items(int nested, bool first, unsigned flags, bool verbose, Width* width);
  Status Escape(size_t at, unsigned flags, Sequence* seq);
  Status CharacterEscape(char32_t c, size_t at, bool in_class, char32_t* value);
  Status ClassEscape(size_t at, std::optional<char32_t>* literal, char* category);
  Status CharacterClass(size_t at, unsigned flags, Sequence* seq);
  Status Repeat(char32_t c, size_t at, Sequence* seq);
  Status Group(size_t at, int nested, bool first, unsigned* flags, bool* verbose, Sequence* seq);
  Status Lookaround(char32_t c, size_t at, int nested, unsigned flags, bool verbose, Sequence* seq);
  Status Condition(size_t at, int nested, unsigned flags, bool verbose, Sequence* seq);
  Status ParseFlags(char32_t c, unsigned* add, unsigned* del, bool* global);
  Status GetUntil(char32_t terminator, const char* what, std::u32string* out);
  Status CheckGroupName(const std::u32string& name, size_t at) const;
  Status CheckLookbehindGroup(uint64_t gid, size_t at) const;
  Status Backref(uint64_t gid, Sequence* seq);

  std::u32string s_;
  size_t pos_ = 0;
  bool capture_group1_;
  unsigned global_flags_ = 0;
  std::vector<std::optional<Width>> groups_{std::nullopt};  // by Python group number; unset: open
  std::map<std::u32string, uint64_t> names_;
  std::optional<uint64_t> lookbehind_groups_;  // groups opened before the outermost lookbehind
  std::map<uint64_t, size_t> condition_refs_;  // numbered conditions, checked at the end
  std::set<uint64_t> referenced_;
  bool top_level_alternation_ = false;
  std::vector<Piece> out_;
};

}  // namespace loom::py_regex_detail
