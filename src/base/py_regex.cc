// Python re → PCRE2: a recursive scanner that follows CPython 3.11's re/_parser.py step by step.
#include "base/py_regex.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <optional>
#include <set>
#include <vector>

#include "base/utf8.h"

namespace loom {

namespace {

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

unsigned FlagBit(char32_t c) {  // the inline flag letters, in the order of their bits
  static constexpr char kLetters[] = "imsxauLt";
  for (unsigned i = 0; kLetters[i] != 0; ++i) {
    if (c == static_cast<unsigned char>(kLetters[i])) return 1u << i;
  }
  return 0;
}

bool IsDigit(char32_t c) { return c >= '0' && c <= '9'; }  // Python's DIGITS: ASCII only
bool IsOctal(char32_t c) { return c >= '0' && c <= '7'; }
bool IsHex(char32_t c) { return IsDigit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }
bool IsAsciiLetter(char32_t c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
bool IsPyWhitespace(char32_t c) {  // re/_parser.py WHITESPACE, skipped in verbose mode
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
const std::vector<std::vector<char32_t>>& CaseGroups() {
  static const std::vector<std::vector<char32_t>> groups = {
      {0x49, 0x69, 0x130, 0x131}, {0x390, 0x1fd3}, {0x3b0, 0x1fe3}, {0xfb05, 0xfb06}};
  return groups;
}

std::string Hex(char32_t c) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "\\x{%x}", static_cast<unsigned>(c));
  return buf;
}

// One character as a PCRE2 literal, the same inside a class and outside.
std::string Literal(char32_t c) {
  if (IsDigit(c) || IsAsciiLetter(c) || c == '_') return std::string(1, static_cast<char>(c));
  if (c > 0x20 && c < 0x7f) return std::string("\\") + static_cast<char>(c);  // punctuation
  return Hex(c);
}

// (lo, hi) widths as re/_parser.py's getwidth() computes them (saturating at MAXREPEAT).
struct Width {
  uint64_t lo = 0;
  uint64_t hi = 0;
};
uint64_t AddWidth(uint64_t a, uint64_t b) { return std::min(a + b, kMaxRepeat); }
uint64_t MulWidth(uint64_t a, uint64_t b) {
  if (a == 0 || b == 0) return 0;
  return a > kMaxRepeat / b ? kMaxRepeat : std::min(a * b, kMaxRepeat);
}

// An ASCII decimal string as a number, saturating past `cap`.
uint64_t ParseDecimal(std::u32string_view digits, uint64_t cap) {
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

StatusOr<PcreTranslation> Translator::Run() {
  Width width;
  RETURN_IF_ERROR(Alternation(0, 0, false, &width));
  if (!AtEnd()) return Error("unbalanced parenthesis", pos_);
  for (const auto& [gid, at] : condition_refs_) {
    if (gid >= groups_.size()) return Error("invalid group reference " + std::to_string(gid), at);
  }
  if (capture_group1_ && groups_.size() > 1) referenced_.insert(1);
  std::map<uint64_t, int> number;  // Python group → PCRE2 group
  for (uint64_t gid : referenced_) number.emplace(gid, static_cast<int>(number.size()) + 1);
  PcreTranslation t;
  for (const Piece& p : out_) {
    switch (p.kind) {
      case Piece::kText:
        t.pattern += p.text;
        break;
      case Piece::kOpenGroup:
        t.pattern += number.count(p.group) ? "(" : "(?:";
        break;
      case Piece::kBackref:
        t.pattern += "\\g{" + std::to_string(number.at(p.group)) + "}";
        break;
      case Piece::kCondition:
        t.pattern += "(?(" + std::to_string(number.at(p.group)) + ")";
        break;
    }
  }
  t.ascii = (global_flags_ & kAscii) != 0;
  t.python_groups = static_cast<int>(groups_.size()) - 1;
  t.pcre_groups = static_cast<int>(number.size());
  t.top_level_alternation = top_level_alternation_;
  return t;
}

// _parse_sub: branches separated by |.
Status Translator::Alternation(int nested, unsigned flags, bool verbose, Width* width) {
  Width all{kMaxRepeat, 0};
  int branches = 0;
  while (true) {
    Width w;
    RETURN_IF_ERROR(Items(nested + 1, nested == 0 && branches == 0, flags, verbose, &w));
    all = {std::min(all.lo, w.lo), std::max(all.hi, w.hi)};
    ++branches;
    if (!Match('|')) break;
    Emit("|");
    if (nested == 0) {  // global flags from the first branch hold for the others
      top_level_alternation_ = true;
      flags = global_flags_;
      verbose = (global_flags_ & kVerbose) != 0;
    }
  }
  *width = all;
  return OkStatus();
}

// _parse: the items of one branch.
Status Translator::Items(int nested, bool first, unsigned flags, bool verbose, Width* width) {
  // A group adds two levels of `nested` (as in Python), a condition one.
  if (nested > 2 * kMaxNesting + 1) {
    return Error("groups nested more than " + std::to_string(kMaxNesting) + " deep (loom's limit)",
                 pos_);
  }
  Sequence seq;
  while (!AtEnd() && Peek() != '|' && Peek() != ')') {
    const size_t at = pos_;
    const char32_t c = s_[pos_++];
    if (verbose && IsPyWhitespace(c)) continue;
    if (verbose && c == '#') {  // to the end of the line; a backslash pair is one token
      while (!AtEnd()) {
        const char32_t d = s_[pos_++];
        if (d == '\n') break;
        if (d == '\\') {
          if (AtEnd()) return Error("bad escape (end of pattern)", pos_ - 1);
          ++pos_;
        }
      }
      continue;
    }
    switch (c) {
      case '\\':
        RETURN_IF_ERROR(Escape(at, flags, &seq));
        break;
      case '[':
        RETURN_IF_ERROR(CharacterClass(at, flags, &seq));
        break;
      case '*':
      case '+':
      case '?':
      case '{':
        RETURN_IF_ERROR(Repeat(c, at, &seq));
        break;
      case '.':
        Emit(".");
        seq.Push(Last::kItem, {1, 1});
        break;
      case '(':
        RETURN_IF_ERROR(Group(at, nested, first, &flags, &verbose, &seq));
        break;
      case '^':
      case '$':
        Emit(std::string(1, static_cast<char>(c)));
        seq.Push(Last::kAnchor, {0, 0});
        break;
      default:
        EmitLiteral(c, flags);
        seq.Push(Last::kItem, {1, 1});
    }
  }
  *width = seq.Total();
  return OkStatus();
}

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
    return Error("named Unicode escapes (" + Source(at, pos_) +
                     ") are not supported by loom; write the character, or \\uXXXX",
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

// A quantifier after the last item (`c` read at `at`); a { that starts none is a literal.
Status Translator::Repeat(char32_t c, size_t at, Sequence* seq) {
  uint64_t min = 0, max = kMaxRepeat;
  if (c == '?') {
    max = 1;
  } else if (c == '+') {
    min = 1;
  } else if (c == '{') {
    const size_t here = pos_;
    std::u32string lo, hi;
    bool repeat = false;
    if (Peek() != '}') {  // {} is text
      while (IsDigit(Peek())) lo += s_[pos_++];
      if (Match(',')) {
        while (IsDigit(Peek())) hi += s_[pos_++];
      } else {
        hi = lo;
      }
      repeat = Match('}');
    }
    if (!repeat) {  // a { that starts no repeat is text, and what follows it is read again
      pos_ = here;
      EmitLiteral('{', 0);
      seq->Push(Last::kItem, {1, 1});
      return OkStatus();
    }
    if (!lo.empty()) min = ParseDecimal(lo, kMaxRepeat);
    if (!hi.empty()) max = ParseDecimal(hi, kMaxRepeat);
    if (min >= kMaxRepeat || (!hi.empty() && max >= kMaxRepeat)) {
      return Error("the repetition number is too large", at);
    }
    if (max < min) return Error("min repeat greater than max repeat", at);
  }
  if (seq->kind == Last::kNone || seq->kind == Last::kAnchor) return Error("nothing to repeat", at);
  if (seq->kind == Last::kRepeat) return Error("multiple repeat", at);
  std::string q;
  if (min == 0 && max == kMaxRepeat) {
    q = "*";
  } else if (min == 1 && max == kMaxRepeat) {
    q = "+";
  } else if (min == 0 && max == 1) {
    q = "?";
  } else {
    if (min > kPcreMaxRepeat || (max != kMaxRepeat && max > kPcreMaxRepeat)) {
      return Error("repeat count above " + std::to_string(kPcreMaxRepeat) + " (loom's limit)", at);
    }
    q = "{" + std::to_string(min) +
        (max == min ? "" : "," + (max == kMaxRepeat ? std::string() : std::to_string(max))) + "}";
  }
  if (Match('?')) {
    q += "?";  // lazy
  } else if (Match('+')) {
    q += "+";  // possessive (Python 3.11)
  }
  Emit(q);
  seq->last = {MulWidth(seq->last.lo, min), MulWidth(seq->last.hi, max)};
  seq->kind = Last::kRepeat;
  return OkStatus();
}

Status Translator::Backref(uint64_t gid, Sequence* seq) {
  referenced_.insert(gid);
  out_.push_back({Piece::kBackref, "", gid});
  seq->Push(Last::kItem, *groups_[gid]);
  return OkStatus();
}

// A ( read at `at`: a group, a lookaround, a condition, flags or a comment.
Status Translator::Group(size_t at, int nested, bool first, unsigned* flags, bool* verbose,
                         Sequence* seq) {
  bool capture = true, atomic = false;
  std::u32string name;
  unsigned add = 0, del = 0;
  if (Match('?')) {
    if (AtEnd()) return Error("unexpected end of pattern", pos_);
    const char32_t c = s_[pos_++];
    if (c == 'P') {
      if (Match('<')) {
        RETURN_IF_ERROR(GetUntil('>', "group name", &name));
        RETURN_IF_ERROR(CheckGroupName(name, at));
      } else if (Match('=')) {  // a named back-reference
        RETURN_IF_ERROR(GetUntil(')', "group name", &name));
        RETURN_IF_ERROR(CheckGroupName(name, at));
        auto it = names_.find(name);
        if (it == names_.end()) return Error("unknown group name '" + EncodeUtf8(name) + "'", at);
        if (!Closed(it->second)) return Error("cannot refer to an open group", at);
        RETURN_IF_ERROR(CheckLookbehindGroup(it->second, at));
        return Backref(it->second, seq);
      } else {
        if (AtEnd()) return Error("unexpected end of pattern", pos_);
        return Error("unknown extension ?P" + Source(pos_, pos_ + 1), at);
      }
    } else if (c == ':') {
      capture = false;
    } else if (c == '#') {  // a comment, to the first ) that is not escaped
      while (true) {
        if (AtEnd()) return Error("missing ), unterminated comment", at);
        const char32_t d = s_[pos_++];
        if (d == ')') return OkStatus();
        if (d == '\\') {
          if (AtEnd()) return Error("bad escape (end of pattern)", pos_ - 1);
          ++pos_;
        }
      }
    } else if (c == '=' || c == '!' || c == '<') {
      return Lookaround(c, at, nested, *flags, *verbose, seq);
    } else if (c == '(') {
      return Condition(at, nested, *flags, *verbose, seq);
    } else if (c == '>') {
      capture = false;
      atomic = true;
    } else if (FlagBit(c) != 0 || c == '-') {
      bool global = false;
      RETURN_IF_ERROR(ParseFlags(c, &add, &del, &global));
      if (global) {
        if (!first || seq->kind != Last::kNone) {
          return Error("global flags not at the start of the expression", at);
        }
        global_flags_ |= add;
        if ((global_flags_ & kAscii) && (global_flags_ & kUnicode)) {
          return Error("ASCII and UNICODE flags are incompatible", at);
        }
        if ((global_flags_ & kAscii) && (global_flags_ & kIgnoreCase)) {
          return Error("(?a) with (?i) (ASCII-only case folding) is not supported by loom", at);
        }
        *flags |= add;
        *verbose = (global_flags_ & kVerbose) != 0;
        std::string pcre;
        for (char f : {'i', 'm', 's'}) {
          if (add & FlagBit(f)) pcre += f;
        }
        if (!pcre.empty()) Emit("(?" + pcre + ")");
        return OkStatus();
      }
      if (add & kAscii) {
        return Error("(?a:...) (ASCII-only matching in part of a pattern) is not supported by loom",
                     at);
      }
      if ((global_flags_ & kAscii) && (add & (kUnicode | kIgnoreCase))) {
        return Error("(?u:...) or (?i:...) in an ASCII-only (?a) pattern is not supported by loom",
                     at);
      }
      capture = false;
    } else {
      return Error("unknown extension ?" + Source(pos_ - 1, pos_), at);
    }
  }
  uint64_t gid = 0;
  if (capture) {
    gid = groups_.size();
    if (!name.empty()) {
      auto [it, inserted] = names_.emplace(name, gid);
      if (!inserted) {
        return Error("redefinition of group name '" + EncodeUtf8(name) + "' as group " +
                         std::to_string(gid) + "; was group " + std::to_string(it->second),
                     at);
      }
    }
    groups_.emplace_back();
    out_.push_back({Piece::kOpenGroup, "", gid});
  } else if (atomic) {
    Emit("(?>");
  } else {
    std::string on, off;
    for (char f : {'i', 'm', 's'}) {
      if (add & FlagBit(f)) on += f;
      if (del & FlagBit(f)) off += f;
    }
    Emit("(?" + on + (off.empty() ? "" : "-" + off) + ":");
  }
  const unsigned sub_flags = (*flags | add) & ~del;
  const bool sub_verbose = (*verbose || (add & kVerbose)) && !(del & kVerbose);
  Width w;
  RETURN_IF_ERROR(Alternation(nested + 1, sub_flags, sub_verbose, &w));
  if (!Match(')')) return Error("missing ), unterminated subpattern", at);
  if (capture) groups_[gid] = w;
  Emit(")");
  seq->Push(Last::kItem, w);
  return OkStatus();
}

// A lookaround, (?= (?! (?<= or (?<! (`c` after "(?", the ( at `at`).
Status Translator::Lookaround(char32_t c, size_t at, int nested, unsigned flags, bool verbose,
                              Sequence* seq) {
  char32_t kind = c;
  const bool behind = c == '<';
  if (behind) {
    if (AtEnd()) return Error("unexpected end of pattern", pos_);
    kind = s_[pos_++];
    if (kind != '=' && kind != '!') {
      return Error("unknown extension ?<" + Source(pos_ - 1, pos_), at);  // (?<name> too
    }
  }
  const bool outermost = behind && !lookbehind_groups_;
  if (outermost) lookbehind_groups_ = groups_.size();
  // In a group of its own: Python may repeat a lookaround, and PCRE2 gets one atom.
  Emit(std::string("(?:(?") + (behind ? "<" : "") + static_cast<char>(kind));
  Width w;
  RETURN_IF_ERROR(Alternation(nested + 1, flags, verbose, &w));
  if (outermost) lookbehind_groups_.reset();
  if (!Match(')')) return Error("missing ), unterminated subpattern", at);
  if (behind && (w.lo != w.hi || w.hi >= kMaxRepeat)) {
    return Error("look-behind requires fixed-width pattern", at);
  }
  Emit("))");
  seq->Push(Last::kItem, {0, 0});
  return OkStatus();
}

// A condition, (?(id/name)yes|no) (the ( at `at`; "(?(" read).
Status Translator::Condition(size_t at, int nested, unsigned flags, bool verbose, Sequence* seq) {
  const size_t name_at = pos_;
  std::u32string cond;
  RETURN_IF_ERROR(GetUntil(')', "group name", &cond));
  uint64_t gid = 0;
  const bool number = std::all_of(cond.begin(), cond.end(), IsDigit);
  if (!number) {
    RETURN_IF_ERROR(CheckGroupName(cond, name_at));
    auto it = names_.find(cond);
    if (it == names_.end()) return Error("unknown group name '" + EncodeUtf8(cond) + "'", name_at);
    gid = it->second;
  } else {
    gid = ParseDecimal(cond, kMaxGroups);
    if (gid == 0) return Error("bad group number", name_at);
    if (gid >= kMaxGroups) return Error("invalid group reference " + EncodeUtf8(cond), name_at);
    condition_refs_.emplace(gid, name_at);
  }
  RETURN_IF_ERROR(CheckLookbehindGroup(gid, name_at));
  referenced_.insert(gid);
  out_.push_back({Piece::kCondition, "", gid});
  Width yes, no;
  RETURN_IF_ERROR(Items(nested + 1, false, flags, verbose, &yes));
  const bool has_no = Match('|');
  if (has_no) {
    Emit("|");
    RETURN_IF_ERROR(Items(nested + 1, false, flags, verbose, &no));
    if (Peek() == '|' && !AtEnd()) {
      return Error("conditional backref with more than two branches", pos_);
    }
  }
  if (!Match(')')) return Error("missing ), unterminated subpattern", at);
  Emit(")");
  seq->Push(Last::kItem,
            has_no ? Width{std::min(yes.lo, no.lo), std::max(yes.hi, no.hi)} : Width{0, yes.hi});
  return OkStatus();
}

// _parse_flags: `c` (a flag or -) follows "(?"; `global`: the (?flags) form.
Status Translator::ParseFlags(char32_t c, unsigned* add, unsigned* del, bool* global) {
  auto check = [&](char32_t f) -> Status {
    if (f == 'L') return Error("bad inline flags: cannot use 'L' flag with a str pattern", pos_);
    if (f == 't') {
      return Error("the template flag (?t) is not supported (Python 3.13 removed it)", pos_);
    }
    return OkStatus();
  };
  if (c != '-') {
    while (true) {
      RETURN_IF_ERROR(check(c));
      const unsigned flag = FlagBit(c);
      *add |= flag;
      if ((flag & kTypeFlags) && (*add & kTypeFlags) != flag) {
        return Error("bad inline flags: flags 'a', 'u' and 'L' are incompatible", pos_);
      }
      if (AtEnd()) return Error("missing -, : or )", pos_);
      c = s_[pos_++];
      if (c == ')' || c == '-' || c == ':') break;
      if (FlagBit(c) == 0)
        return Error(IsAsciiLetter(c) ? "unknown flag" : "missing -, : or )", pos_ - 1);
    }
  }
  if (c == ')') {
    *global = true;
    return OkStatus();
  }
  if (c == '-') {
    if (AtEnd()) return Error("missing flag", pos_);
    c = s_[pos_++];
    if (FlagBit(c) == 0) return Error(IsAsciiLetter(c) ? "unknown flag" : "missing flag", pos_ - 1);
    while (true) {
      RETURN_IF_ERROR(check(c));
      const unsigned flag = FlagBit(c);
      if (flag & kTypeFlags)
        return Error("bad inline flags: cannot turn off flags 'a', 'u' and 'L'", pos_);
      *del |= flag;
      if (AtEnd()) return Error("missing :", pos_);
      c = s_[pos_++];
      if (c == ':') break;
      if (FlagBit(c) == 0) return Error(IsAsciiLetter(c) ? "unknown flag" : "missing :", pos_ - 1);
    }
  }
  if (*add & *del) return Error("bad inline flags: flag turned on and off", pos_);
  return OkStatus();
}

// Tokenizer.getuntil: up to `terminator` (a backslash pair is one token, never the terminator).
Status Translator::GetUntil(char32_t terminator, const char* what, std::u32string* out) {
  const size_t start = pos_;
  while (true) {
    if (AtEnd()) {
      return Error(out->empty() ? std::string("missing ") + what
                                : "missing " + EncodeUtf8(std::u32string(1, terminator)) +
                                      ", unterminated name",
                   start);
    }
    const char32_t c = s_[pos_++];
    if (c == '\\') {
      if (AtEnd()) return Error("bad escape (end of pattern)", pos_ - 1);
      *out += c;
      *out += s_[pos_++];
      continue;
    }
    if (c == terminator) {
      if (out->empty()) return Error(std::string("missing ") + what, start);
      return OkStatus();
    }
    *out += c;
  }
}

// Python takes any identifier (str.isidentifier()); loom the ASCII ones (groups are numbered in
// the translation, so the name only has to be told apart).
Status Translator::CheckGroupName(const std::u32string& name, size_t at) const {
  if (std::any_of(name.begin(), name.end(), [](char32_t c) { return c >= 0x80; })) {
    return Error(
        "group name '" + EncodeUtf8(name) + "' is not ASCII (loom accepts ASCII names only)", at);
  }
  const bool ok = !IsDigit(name[0]) && std::all_of(name.begin(), name.end(), [](char32_t c) {
    return IsAsciiLetter(c) || IsDigit(c) || c == '_';
  });
  if (!ok) return Error("bad character in group name '" + EncodeUtf8(name) + "'", at);
  return OkStatus();
}

// State.checklookbehindgroup: a lookbehind may use only groups closed before it began.
Status Translator::CheckLookbehindGroup(uint64_t gid, size_t at) const {
  if (!lookbehind_groups_) return OkStatus();
  if (!Closed(gid)) return Error("cannot refer to an open group", at);
  if (gid >= *lookbehind_groups_) {
    return Error("cannot refer to group defined in the same lookbehind subpattern", at);
  }
  return OkStatus();
}

}  // namespace

StatusOr<PcreTranslation> TranslatePythonRegex(std::string_view pattern, bool capture_group1) {
  std::u32string source;
  if (!DecodeUtf8(pattern, &source)) return InvalidArgument("not valid UTF-8");
  return Translator(std::move(source), capture_group1).Run();
}

}  // namespace loom
