// Unicode helpers: UTF-8 walking and repair, character classes and normalization via utf8proc.
#include "tokenizer/unicode.h"

#include <utf8proc.h>

#include <array>
#include <cstdlib>

namespace loom::tokenizer {

char32_t NextCodePoint(std::string_view s, size_t* pos) {
  const auto* p = reinterpret_cast<const uint8_t*>(s.data()) + *pos;
  const uint8_t b0 = p[0];
  if (b0 < 0x80) {
    *pos += 1;
    return b0;
  }
  const int len = Utf8Length(b0);
  if (*pos + len > s.size()) {  // truncated: treat the byte alone (callers pass valid UTF-8)
    *pos += 1;
    return b0;
  }
  *pos += len;
  switch (len) {
    case 2: return ((b0 & 0x1F) << 6) | (p[1] & 0x3F);
    case 3: return ((b0 & 0x0F) << 12) | ((p[1] & 0x3F) << 6) | (p[2] & 0x3F);
    case 4:
      return ((b0 & 0x07) << 18) | ((p[1] & 0x3F) << 12) | ((p[2] & 0x3F) << 6) | (p[3] & 0x3F);
    default: return b0;
  }
}

namespace {

// Length of the well-formed UTF-8 prefix of the sequence at s[i], or 0 with *consumed set to the
// number of bytes that form the maximal ill-formed subsequence (Unicode §3.9, as Rust does it).
int WellFormedAt(const uint8_t* s, size_t n, size_t i, size_t* consumed) {
  const uint8_t b0 = s[i];
  if (b0 < 0x80) return 1;
  int len;
  uint8_t lo = 0x80, hi = 0xBF;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    len = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    len = 3;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    len = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    *consumed = 1;
    return 0;
  }
  size_t k = 1;
  for (; k < static_cast<size_t>(len); ++k) {
    if (i + k >= n) break;
    const uint8_t b = s[i + k];
    const uint8_t l = k == 1 ? lo : 0x80, h = k == 1 ? hi : 0xBF;
    if (b < l || b > h) break;
  }
  if (k == static_cast<size_t>(len)) return len;
  *consumed = k;
  return 0;
}

}  // namespace

bool IsValidUtf8(std::string_view s) {
  const auto* p = reinterpret_cast<const uint8_t*>(s.data());
  size_t i = 0;
  while (i < s.size()) {
    if (p[i] < 0x80) {
      ++i;
      continue;
    }
    size_t consumed = 0;
    const int len = WellFormedAt(p, s.size(), i, &consumed);
    if (len == 0) return false;
    i += len;
  }
  return true;
}

std::string Utf8Lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  const auto* p = reinterpret_cast<const uint8_t*>(bytes.data());
  size_t i = 0;
  while (i < bytes.size()) {
    size_t consumed = 0;
    const int len = WellFormedAt(p, bytes.size(), i, &consumed);
    if (len > 0) {
      out.append(bytes.data() + i, len);
      i += len;
    } else {
      out.append("\xEF\xBF\xBD");
      i += consumed;
    }
  }
  return out;
}

bool IsWhitespace(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}

namespace {

// Other_Alphabetic outside the marks (circled / squared Latin letters, all So).
bool IsOtherAlphabeticSymbol(char32_t c) {
  return (c >= 0x24B6 && c <= 0x24E9) || (c >= 0x1F130 && c <= 0x1F149) ||
         (c >= 0x1F150 && c <= 0x1F169) || (c >= 0x1F170 && c <= 0x1F189);
}

bool IsAlphabetic(char32_t c, utf8proc_category_t cat) {
  switch (cat) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO:
    case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_MC:  // spacing vowel signs are Other_Alphabetic
      return true;
    default:
      return IsOtherAlphabeticSymbol(c);
  }
}

}  // namespace

bool IsNumeric(char32_t c) {
  if (c < 0x80) return c >= '0' && c <= '9';
  const auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(c));
  return cat == UTF8PROC_CATEGORY_ND || cat == UTF8PROC_CATEGORY_NL || cat == UTF8PROC_CATEGORY_NO;
}

bool IsAlphanumeric(char32_t c) {
  if (c < 0x80) return (c >= '0' && c <= '9') || ((c | 0x20) >= 'a' && (c | 0x20) <= 'z');
  const auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(c));
  return IsAlphabetic(c, cat) || cat == UTF8PROC_CATEGORY_ND || cat == UTF8PROC_CATEGORY_NO;
}

bool IsPunctuation(char32_t c) {
  if (c < 0x80) {
    return (c >= 0x21 && c <= 0x2F) || (c >= 0x3A && c <= 0x40) || (c >= 0x5B && c <= 0x60) ||
           (c >= 0x7B && c <= 0x7E);
  }
  const auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(c));
  return cat >= UTF8PROC_CATEGORY_PC && cat <= UTF8PROC_CATEGORY_PO;
}

bool IsWordChar(char32_t c) {
  if (c < 0x80) {
    return (c >= '0' && c <= '9') || ((c | 0x20) >= 'a' && (c | 0x20) <= 'z') || c == '_';
  }
  if (c == 0x200C || c == 0x200D) return true;
  const auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(c));
  return IsAlphabetic(c, cat) || cat == UTF8PROC_CATEGORY_MN || cat == UTF8PROC_CATEGORY_ME ||
         cat == UTF8PROC_CATEGORY_ND || cat == UTF8PROC_CATEGORY_PC;
}

std::string Normalize(std::string_view s, NormalForm form) {
  bool ascii = true;
  for (unsigned char c : s) ascii &= c < 0x80;
  if (ascii) return std::string(s);  // every normal form leaves ASCII as it is
  int options = UTF8PROC_STABLE;
  switch (form) {
    case NormalForm::kNfc: options |= UTF8PROC_COMPOSE; break;
    case NormalForm::kNfd: options |= UTF8PROC_DECOMPOSE; break;
    case NormalForm::kNfkc: options |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT; break;
    case NormalForm::kNfkd: options |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT; break;
  }
  utf8proc_uint8_t* out = nullptr;
  const utf8proc_ssize_t n =
      utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data()),
                   static_cast<utf8proc_ssize_t>(s.size()), &out,
                   static_cast<utf8proc_option_t>(options));
  if (n < 0) return std::string(s);  // not reached for valid UTF-8
  std::string result(reinterpret_cast<char*>(out), static_cast<size_t>(n));
  std::free(out);
  return result;
}

std::string Lowercase(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t pos = 0;
  while (pos < s.size()) {
    const unsigned char b = s[pos];
    if (b < 0x80) {
      out.push_back(static_cast<char>(b >= 'A' && b <= 'Z' ? b + 32 : b));
      ++pos;
      continue;
    }
    const char32_t cp = NextCodePoint(s, &pos);
    if (cp == 0x130) {  // the one character whose full lowercase is two: i + combining dot
      out.append("i\xCC\x87");
      continue;
    }
    AppendUtf8(static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(cp))), &out);
  }
  return out;
}

namespace {

struct ByteTables {
  std::array<std::string, 256> byte_to_char;
  std::array<int16_t, 324> char_to_byte;  // code points < 324 cover the whole table
  ByteTables() {
    char_to_byte.fill(-1);
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
      const char32_t cp = printable ? b : 256 + n++;
      AppendUtf8(cp, &byte_to_char[b]);
      char_to_byte[cp] = static_cast<int16_t>(b);
    }
  }
};

const ByteTables& Tables() {
  static const ByteTables tables;
  return tables;
}

}  // namespace

const std::string& ByteToChar(uint8_t b) { return Tables().byte_to_char[b]; }

int CharToByte(char32_t cp) { return cp < 324 ? Tables().char_to_byte[cp] : -1; }

}  // namespace loom::tokenizer
