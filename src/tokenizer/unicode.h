// Unicode helpers for the tokenizer: UTF-8 walking, character classes, normalization, case.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "base/status.h"
#include "base/utf8.h"

namespace loom::tokenizer {

// Decodes the code point at s[*pos] (valid UTF-8 assumed) and advances *pos past it.
char32_t NextCodePoint(std::string_view s, size_t* pos);
// Byte length of the UTF-8 sequence that starts with `lead` (1 for a stray byte).
inline int Utf8Length(uint8_t lead) {
  return lead < 0x80 ? 1 : lead < 0xE0 ? (lead >= 0xC0 ? 2 : 1) : lead < 0xF0 ? 3 : lead < 0xF8 ? 4 : 1;
}
using loom::AppendUtf8;  // base/utf8.h: one encoder for the tokenizer, templates and regexes

// True when `s` is well-formed UTF-8.
bool IsValidUtf8(std::string_view s);
// Same as Rust's String::from_utf8_lossy: each maximal ill-formed subsequence → one U+FFFD.
std::string Utf8Lossy(std::string_view bytes);

// Character classes, each as Rust's `char` method of the same name defines it (the HF
// tokenizers library is written in Rust).
bool IsWhitespace(char32_t cp);    // char::is_whitespace (White_Space property)
bool IsAlphanumeric(char32_t cp);  // char::is_alphanumeric (Alphabetic or Numeric)
bool IsNumeric(char32_t cp);       // char::is_numeric (Nd, Nl, No)
bool IsPunctuation(char32_t cp);   // ASCII punctuation or a P* category (HF is_punc)
bool IsWordChar(char32_t cp);      // regex crate \w (Alphabetic, M, Nd, Pc, Join_Control)

enum class NormalForm { kNfc, kNfd, kNfkc, kNfkd };
// Unicode normalization of valid UTF-8 (utf8proc).
std::string Normalize(std::string_view s, NormalForm form);
// char::to_lowercase applied to each character (full mapping, no final-sigma context).
std::string Lowercase(std::string_view s);

// GPT-2's byte ↔ printable-character table used by the ByteLevel components.
// ByteToChar(b) is the UTF-8 of the character standing for byte b.
const std::string& ByteToChar(uint8_t b);
// Inverse: the byte a character stands for, or -1.
int CharToByte(char32_t cp);

}  // namespace loom::tokenizer
