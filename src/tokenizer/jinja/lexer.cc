// Jinja lexer: text/tag splitting with trim_blocks, lstrip_blocks and '-'/'+' markers as jinja2 does.
#include "tokenizer/jinja/lexer.h"

#include <cstring>

#include "tokenizer/jinja/utf8.h"

namespace loom::jinja {
namespace {

bool IsNameStart(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool IsDigit(char c) { return c >= '0' && c <= '9'; }

// Length of the Python-whitespace code point at s[pos], or 0.
size_t SpaceLen(const std::string& s, size_t pos) {
  unsigned char c = static_cast<unsigned char>(s[pos]);
  if (c < 0x80) return IsPySpace(c) ? 1 : 0;
  size_t len = (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
  if (pos + len > s.size()) return 0;
  std::u32string cp = DecodeUtf8(std::string_view(s).substr(pos, len));
  return cp.size() == 1 && IsPySpace(cp[0]) ? len : 0;
}

class Lexer {
 public:
  Lexer(std::string source, const LexerOptions& options)
      : src_(std::move(source)), options_(options) {}

  StatusOr<std::vector<Token>> Run() {
    while (pos_ < src_.size()) {
      size_t idx = FindOpener(pos_);
      if (idx == std::string::npos) {
        Emit(TokenType::kText, src_.substr(pos_), line_);
        break;
      }
      char kind = src_[idx + 1];
      char sign = idx + 2 < src_.size() && (src_[idx + 2] == '-' || src_[idx + 2] == '+')
                      ? src_[idx + 2]
                      : 0;
      std::string text = src_.substr(pos_, idx - pos_);
      int text_line = line_;
      CountLines(pos_, idx);
      ApplyLeftControl(&text, kind, sign);
      if (!text.empty()) Emit(TokenType::kText, text, text_line);
      size_t raw_end = 0;
      if (kind == '%' && MatchRawTag(idx, "raw", &raw_end)) {
        RETURN_IF_ERROR(LexRaw(idx, raw_end));
        continue;
      }
      pos_ = idx + 2 + (sign ? 1 : 0);
      if (kind == '#') {
        RETURN_IF_ERROR(LexComment(idx));
      } else {
        RETURN_IF_ERROR(LexTag(kind == '{'));
      }
    }
    Emit(TokenType::kEof, "", line_);
    return std::move(tokens_);
  }

 private:
  size_t FindOpener(size_t from) const {
    for (size_t i = from; i + 1 < src_.size(); ++i) {
      if (src_[i] == '{' && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) {
        return i;
      }
    }
    return std::string::npos;
  }

  void CountLines(size_t from, size_t to) {
    for (size_t i = from; i < to; ++i) {
      if (src_[i] == '\n') ++line_;
    }
  }

  void Emit(TokenType type, std::string value, int line) {
    tokens_.push_back(Token{type, std::move(value), line});
  }

  // '-' strips all whitespace before the tag; otherwise lstrip_blocks strips spaces from the
  // start of the line up to a block or comment tag (not `{{`), as jinja2's OptionalLStrip does.
  void ApplyLeftControl(std::string* text, char kind, char sign) {
    if (sign == '-') {
      *text = PyStrip(*text, false, true, nullptr);
      return;
    }
    if (sign == '+' || !options_.lstrip_blocks || kind == '{') return;
    size_t nl = text->rfind('\n');
    size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
    if (l_pos == 0 && !line_starting_) return;
    if (l_pos == text->size()) return;
    for (size_t i = l_pos; i < text->size();) {
      size_t len = SpaceLen(*text, i);
      if (len == 0) return;
      i += len;
    }
    text->resize(l_pos);
  }

  // Skips whitespace after a '-' end marker, or one newline after a block end with trim_blocks.
  void ApplyRightControl(bool strip_all, bool trim_newline) {
    if (strip_all) {
      while (pos_ < src_.size()) {
        size_t len = SpaceLen(src_, pos_);
        if (len == 0) break;
        if (src_[pos_] == '\n') ++line_;
        pos_ += len;
      }
    } else if (trim_newline && pos_ < src_.size() && src_[pos_] == '\n') {
      ++pos_;
      ++line_;
    }
    line_starting_ = pos_ > 0 && src_[pos_ - 1] == '\n';
  }

  // Matches `{%[-+]?\s*<word>\s*[-+]?%}` at `at`; sets *end to the index after `%}`.
  bool MatchRawTag(size_t at, const char* word, size_t* end) const {
    size_t i = at + 2;
    if (i < src_.size() && (src_[i] == '-' || src_[i] == '+')) ++i;
    while (i < src_.size() && SpaceLen(src_, i)) i += SpaceLen(src_, i);
    size_t wl = std::strlen(word);
    if (src_.compare(i, wl, word) != 0) return false;
    i += wl;
    if (i < src_.size() && (IsNameStart(src_[i]) || IsDigit(src_[i]))) return false;
    while (i < src_.size() && SpaceLen(src_, i)) i += SpaceLen(src_, i);
    if (i < src_.size() && (src_[i] == '-' || src_[i] == '+')) ++i;
    if (src_.compare(i, 2, "%}") != 0) return false;
    *end = i + 2;
    return true;
  }

  Status LexRaw(size_t begin, size_t begin_end) {
    int raw_line = line_;
    CountLines(begin, begin_end);
    pos_ = begin_end;
    ApplyRightControl(src_[begin_end - 3] == '-', false);
    size_t search = pos_;
    while (true) {
      size_t idx = src_.find("{%", search);
      if (idx == std::string::npos) {
        return InvalidArgument("line " + std::to_string(raw_line) +
                               ": syntax error: missing end of raw directive");
      }
      size_t end = 0;
      if (!MatchRawTag(idx, "endraw", &end)) {
        search = idx + 2;
        continue;
      }
      std::string text = src_.substr(pos_, idx - pos_);
      char sign = src_[idx + 2] == '-' || src_[idx + 2] == '+' ? src_[idx + 2] : 0;
      int text_line = line_;
      CountLines(pos_, end);
      ApplyLeftControl(&text, '%', sign);
      if (!text.empty()) Emit(TokenType::kText, text, text_line);
      pos_ = end;
      char end_sign = src_[end - 3];
      ApplyRightControl(end_sign == '-', end_sign != '+' && options_.trim_blocks);
      return OkStatus();
    }
  }

  Status LexComment(size_t begin) {
    size_t idx = src_.find("#}", pos_);
    if (idx == std::string::npos) {
      return InvalidArgument("line " + std::to_string(line_) +
                             ": syntax error: missing end of comment tag");
    }
    bool strip_all = idx > begin + 2 && src_[idx - 1] == '-';
    CountLines(pos_, idx + 2);
    pos_ = idx + 2;
    ApplyRightControl(strip_all, options_.trim_blocks);
    return OkStatus();
  }

  Status Error(const std::string& what) const {
    return InvalidArgument("line " + std::to_string(line_) + ": syntax error: " + what);
  }

  Status LexTag(bool is_var) {
    Emit(is_var ? TokenType::kVarBegin : TokenType::kBlockBegin, "", line_);
    std::string brackets;
    while (true) {
      while (pos_ < src_.size() && SpaceLen(src_, pos_)) {
        if (src_[pos_] == '\n') ++line_;
        pos_ += SpaceLen(src_, pos_);
      }
      if (pos_ >= src_.size()) {
        return Error(std::string("unexpected end of template, expected '") +
                     (is_var ? "}}" : "%}") + "'");
      }
      if (brackets.empty()) {
        const char* end = is_var ? "}}" : "%}";
        bool minus = src_[pos_] == '-' && src_.compare(pos_ + 1, 2, end) == 0;
        bool plus = !is_var && src_[pos_] == '+' && src_.compare(pos_ + 1, 2, end) == 0;
        if (minus || plus || src_.compare(pos_, 2, end) == 0) {
          Emit(is_var ? TokenType::kVarEnd : TokenType::kBlockEnd, "", line_);
          pos_ += (minus || plus) ? 3 : 2;
          ApplyRightControl(minus, !is_var && !plus && options_.trim_blocks);
          return OkStatus();
        }
      }
      char c = src_[pos_];
      if (IsNameStart(c) || static_cast<unsigned char>(c) >= 0x80) {
        size_t b = pos_;
        while (pos_ < src_.size() && (IsNameStart(src_[pos_]) || IsDigit(src_[pos_]) ||
                                      static_cast<unsigned char>(src_[pos_]) >= 0x80)) {
          ++pos_;
        }
        Emit(TokenType::kName, src_.substr(b, pos_ - b), line_);
      } else if (IsDigit(c)) {
        LexNumber();
      } else if (c == '\'' || c == '"') {
        RETURN_IF_ERROR(LexString(c));
      } else {
        static const char* kOps[] = {"//", "**", "==", "!=", ">=", "<=", "+", "-", "*", "/", "%",
                                     "~",  "<",  ">",  "=",  "(",  ")",  "[", "]", "{", "}", ",",
                                     ".",  ":",  "|",  ";"};
        const char* op = nullptr;
        for (const char* o : kOps) {
          if (src_.compare(pos_, std::strlen(o), o) == 0) {
            op = o;
            break;
          }
        }
        if (op == nullptr) return Error(std::string("unexpected char '") + c + "'");
        std::string s(op);
        if (s == "(" || s == "[" || s == "{") {
          brackets.push_back(s[0]);
        } else if (s == ")" || s == "]" || s == "}") {
          char open = s == ")" ? '(' : s == "]" ? '[' : '{';
          if (brackets.empty() || brackets.back() != open) return Error("unexpected '" + s + "'");
          brackets.pop_back();
        }
        Emit(TokenType::kOperator, s, line_);
        pos_ += s.size();
      }
    }
  }

  void LexNumber() {
    size_t b = pos_;
    auto digits = [&] {
      while (pos_ < src_.size() &&
             (IsDigit(src_[pos_]) || (src_[pos_] == '_' && pos_ + 1 < src_.size() &&
                                      IsDigit(src_[pos_ + 1])))) {
        ++pos_;
      }
    };
    digits();
    bool is_float = false;
    bool after_dot = !tokens_.empty() && tokens_.back().type == TokenType::kOperator &&
                     tokens_.back().value == ".";
    if (!after_dot) {
      if (pos_ + 1 < src_.size() && src_[pos_] == '.' && IsDigit(src_[pos_ + 1])) {
        ++pos_;
        digits();
        is_float = true;
      }
      if (pos_ < src_.size() && (src_[pos_] == 'e' || src_[pos_] == 'E')) {
        size_t save = pos_++;
        if (pos_ < src_.size() && (src_[pos_] == '+' || src_[pos_] == '-')) ++pos_;
        if (pos_ < src_.size() && IsDigit(src_[pos_])) {
          digits();
          is_float = true;
        } else {
          pos_ = save;
        }
      }
    }
    std::string text;
    for (size_t i = b; i < pos_; ++i) {
      if (src_[i] != '_') text.push_back(src_[i]);
    }
    Emit(is_float ? TokenType::kFloat : TokenType::kInt, text, line_);
  }

  // Python-style escapes, as jinja2 decodes string literals ("unicode-escape").
  Status LexString(char quote) {
    int start_line = line_;
    ++pos_;
    std::string out;
    while (true) {
      if (pos_ >= src_.size()) {
        line_ = start_line;
        return Error("unterminated string");
      }
      char c = src_[pos_];
      if (c == quote) {
        ++pos_;
        break;
      }
      if (c == '\n') ++line_;
      if (c != '\\' || pos_ + 1 >= src_.size()) {
        out.push_back(c);
        ++pos_;
        continue;
      }
      char e = src_[pos_ + 1];
      pos_ += 2;
      switch (e) {
        case 'n': out.push_back('\n'); break;
        case 't': out.push_back('\t'); break;
        case 'r': out.push_back('\r'); break;
        case '\\': out.push_back('\\'); break;
        case '\'': out.push_back('\''); break;
        case '"': out.push_back('"'); break;
        case 'a': out.push_back('\a'); break;
        case 'b': out.push_back('\b'); break;
        case 'f': out.push_back('\f'); break;
        case 'v': out.push_back('\v'); break;
        case '\n': ++line_; break;  // line continuation
        case 'x':
        case 'u':
        case 'U': {
          size_t n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          if (pos_ + n > src_.size()) return Error("truncated \\" + std::string(1, e) + " escape");
          char32_t cp = 0;
          for (size_t k = 0; k < n; ++k) {
            char h = src_[pos_ + k];
            int d = IsDigit(h) ? h - '0' : (h >= 'a' && h <= 'f') ? h - 'a' + 10
                                         : (h >= 'A' && h <= 'F') ? h - 'A' + 10 : -1;
            if (d < 0) return Error("truncated \\" + std::string(1, e) + " escape");
            cp = cp * 16 + d;
          }
          pos_ += n;
          AppendUtf8(cp, &out);
          break;
        }
        default:
          if (e >= '0' && e <= '7') {
            char32_t cp = e - '0';
            for (int k = 0; k < 2 && pos_ < src_.size() && src_[pos_] >= '0' && src_[pos_] <= '7';
                 ++k) {
              cp = cp * 8 + (src_[pos_++] - '0');
            }
            AppendUtf8(cp, &out);
          } else {
            out.push_back('\\');
            --pos_;  // keep the character after the backslash as is
          }
      }
    }
    Emit(TokenType::kString, out, start_line);
    return OkStatus();
  }

  std::string src_;
  LexerOptions options_;
  size_t pos_ = 0;
  int line_ = 1;
  bool line_starting_ = true;
  std::vector<Token> tokens_;
};

}  // namespace

StatusOr<std::vector<Token>> Tokenize(const std::string& source, const LexerOptions& options) {
  // Like jinja2: newlines normalized to "\n" and one trailing newline dropped
  // (keep_trailing_newline=False).
  std::string normalized;
  normalized.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      normalized.push_back('\n');
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      normalized.push_back(source[i]);
    }
  }
  if (!normalized.empty() && normalized.back() == '\n') normalized.pop_back();
  return Lexer(std::move(normalized), options).Run();
}

}  // namespace loom::jinja
