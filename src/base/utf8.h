// Strict UTF-8 to and from code points (for parsers that work on characters, not bytes).
#pragma once

#include <string>
#include <string_view>

namespace loom {

// One code point (a valid scalar value) as UTF-8, appended to `out`.
void AppendUtf8(char32_t cp, std::string* out);
// Code points to UTF-8 (each must be a valid scalar value).
std::string EncodeUtf8(std::u32string_view s);
// Strict UTF-8 (no overlong forms, no surrogates, nothing past U+10FFFF) appended to `out`;
// false on anything else.
bool DecodeUtf8(std::string_view in, std::u32string* out);

}  // namespace loom
