// UTF-8 decoding/encoding, Python-compatible whitespace and a small case-mapping table.
#include "tokenizer/jinja/utf8.h"

#include <string.h>  // memmem

#include <algorithm>

namespace loom::jinja {

size_t FindSubstring(std::string_view s, std::string_view sub, size_t from) {
  if (from > s.size()) return std::string::npos;
  if (sub.empty()) return from;
  // Searched a window at a time, each overlapping the next by sub.size() - 1 so that a match
  // starting in one is found there. A sanitizer's memmem checks the whole range it is handed on
  // every call, which made counting or splitting a 16 MB string quadratic under ASan (over a
  // minute). A window is at least sub.size() long, so the total work stays linear.
  const size_t m = sub.size();
  const size_t step = std::max<size_t>(size_t{1} << 16, m);
  for (size_t begin = from; s.size() - begin >= m; begin += step) {
    const size_t len = std::min(s.size() - begin, step + m - 1);
    const void* p = ::memmem(s.data() + begin, len, sub.data(), m);
    if (p != nullptr) return static_cast<size_t>(static_cast<const char*>(p) - s.data());
    if (s.size() - begin <= step) break;
  }
  return std::string::npos;
}

std::u32string DecodeUtf8(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (len == 0 || i + len > s.size()) {
      out.push_back(0xFFFD);
      ++i;
      continue;
    }
    char32_t cp = len == 1 ? c : len == 2 ? (c & 0x1F) : len == 3 ? (c & 0x0F) : (c & 0x07);
    bool ok = true;
    for (int k = 1; k < len; ++k) {
      unsigned char cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xC0) != 0x80) ok = false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    if (!ok) {
      out.push_back(0xFFFD);
      ++i;
      continue;
    }
    out.push_back(cp);
    i += len;
  }
  return out;
}

std::string EncodeUtf8(std::u32string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t cp : s) AppendUtf8(cp, &out);
  return out;
}

std::string_view Utf8Prefix(std::string_view s, size_t max_bytes) {
  if (s.size() <= max_bytes) return s;
  size_t n = max_bytes;
  // Back off continuation bytes (top bits 10) to the start of the character they belong to.
  while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;
  return s.substr(0, n);
}

bool IsPySpace(char32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 ||
         cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 ||
         cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

std::string PyStrip(std::string_view s, bool left, bool right, const std::string* chars) {
  std::u32string cps = DecodeUtf8(s);
  // The characters to strip, sorted once: a linear scan of them per character made
  // ('a' * 200000).strip('b' * 200000 ~ 'a') take 26 s.
  std::u32string set;
  if (chars != nullptr) {
    set = DecodeUtf8(*chars);
    std::sort(set.begin(), set.end());
    set.erase(std::unique(set.begin(), set.end()), set.end());
  }
  auto strip = [&](char32_t cp) {
    return chars == nullptr ? IsPySpace(cp) : std::binary_search(set.begin(), set.end(), cp);
  };
  size_t b = 0, e = cps.size();
  if (left) {
    while (b < e && strip(cps[b])) ++b;
  }
  if (right) {
    while (e > b && strip(cps[e - 1])) --e;
  }
  return EncodeUtf8(std::u32string_view(cps).substr(b, e - b));
}

char32_t ToUpper(char32_t cp) {
  if (cp >= 'a' && cp <= 'z') return cp - 32;
  if (cp < 0x80) return cp;
  if (cp >= 0xE0 && cp <= 0xFE && cp != 0xF7) return cp - 32;
  if (cp == 0xFF) return 0x178;
  if (cp >= 0x3B1 && cp <= 0x3C9 && cp != 0x3C2) return cp - 32;
  if (cp == 0x3C2) return 0x3A3;
  if (cp == 0xB5) return 0x39C;   // micro sign → capital mu, as Python
  if (cp == 0x3AC) return 0x386;  // Greek with tonos / dialytika
  if (cp >= 0x3AD && cp <= 0x3AF) return cp - 37;
  if (cp == 0x3CA || cp == 0x3CB) return cp - 32;
  if (cp == 0x3CC) return 0x38C;
  if (cp == 0x3CD || cp == 0x3CE) return cp - 63;
  if (cp >= 0x430 && cp <= 0x44F) return cp - 32;
  if (cp >= 0x450 && cp <= 0x45F) return cp - 80;
  return cp;
}

char32_t ToLower(char32_t cp) {
  if (cp >= 'A' && cp <= 'Z') return cp + 32;
  if (cp < 0x80) return cp;
  if (cp >= 0xC0 && cp <= 0xDE && cp != 0xD7) return cp + 32;
  if (cp == 0x178) return 0xFF;
  if (cp >= 0x391 && cp <= 0x3AB && cp != 0x3A2) return cp + 32;
  if (cp == 0x386) return 0x3AC;
  if (cp >= 0x388 && cp <= 0x38A) return cp + 37;
  if (cp == 0x38C) return 0x3CC;
  if (cp == 0x38E || cp == 0x38F) return cp + 63;
  if (cp >= 0x410 && cp <= 0x42F) return cp + 32;
  if (cp >= 0x400 && cp <= 0x40F) return cp + 80;
  return cp;
}

bool IsAlpha(char32_t cp) {
  if (cp < 0x80) return (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z');
  return ToUpper(cp) != cp || ToLower(cp) != cp || cp == 0xDF || (cp >= 0x4E00 && cp <= 0x9FFF);
}

std::string UpperUtf8(std::string_view s) {
  std::u32string cps = DecodeUtf8(s);
  std::u32string out;
  out.reserve(cps.size());
  for (char32_t cp : cps) {
    // Python's str.upper() of the few characters here whose capital is several characters.
    if (cp == 0xDF) {
      out += U"SS";
    } else if (cp == 0x390) {
      out += U"\u0399\u0308\u0301";
    } else if (cp == 0x3B0) {
      out += U"\u03A5\u0308\u0301";
    } else {
      out += ToUpper(cp);
    }
  }
  return EncodeUtf8(out);
}

std::string LowerUtf8(std::string_view s) {
  std::u32string cps = DecodeUtf8(s);
  for (char32_t& cp : cps) cp = ToLower(cp);
  return EncodeUtf8(cps);
}

}  // namespace loom::jinja
