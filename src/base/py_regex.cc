// Python re → PCRE2: a recursive scanner that follows CPython 3.11's re/_parser.py step by step.
#include "base/py_regex.h"

#include "base/py_regex_translator.h"

namespace loom {
namespace py_regex_detail {

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

}  // namespace py_regex_detail

using py_regex_detail::Translator;

StatusOr<PcreTranslation> TranslatePythonRegex(std::string_view pattern, bool capture_group1) {
  std::u32string source;
  if (!DecodeUtf8(pattern, &source)) return InvalidArgument("not valid UTF-8");
  return Translator(std::move(source), capture_group1).Run();
}

}  // namespace loom
