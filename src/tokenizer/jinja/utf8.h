// UTF-8 helpers for the Jinja interpreter: code points, Python's whitespace and simple case mapping.
#pragma once

#include <string>
#include <string_view>

#include "tokenizer/unicode.h"

namespace loom::jinja {

// Decodes UTF-8 into code points; an invalid byte becomes U+FFFD (input comes from JSON, so rare).
std::u32string DecodeUtf8(std::string_view s);
std::string EncodeUtf8(std::u32string_view s);
// The longest prefix of `s` of at most `max_bytes` bytes that does not end inside a character.
std::string_view Utf8Prefix(std::string_view s, size_t max_bytes);
using tokenizer::AppendUtf8;  // one UTF-8 encoder for the tokenizer and templates

// s.find(sub, from) in time linear in the sizes (glibc's memmem): std::string::find is O(n·m) at
// worst, and one template step ('a'*1000000 ~ 'b' in 'a'*2000000) ran for minutes uncharged.
size_t FindSubstring(std::string_view s, std::string_view sub, size_t from = 0);

// Python's str.isspace() for one code point.
bool IsPySpace(char32_t cp);
// Python str.strip()/lstrip()/rstrip() without arguments (Unicode whitespace) or with a set of
// characters to strip (`chars`, UTF-8). O((n + m) log m) for n characters and m in `chars`.
std::string PyStrip(std::string_view s, bool left, bool right, const std::string* chars);

// Simple case mapping: ASCII, Latin-1, Greek and Cyrillic (enough for role names and prose).
char32_t ToUpper(char32_t cp);
char32_t ToLower(char32_t cp);
bool IsAlpha(char32_t cp);
std::string UpperUtf8(std::string_view s);
std::string LowerUtf8(std::string_view s);

}  // namespace loom::jinja
