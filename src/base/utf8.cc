// Strict UTF-8 to and from code points.
#include "base/utf8.h"

namespace loom {

void AppendUtf8(char32_t c, std::string* out) {
  if (c < 0x80) {
    out->push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out->push_back(static_cast<char>(0xc0 | (c >> 6)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3f)));
  } else if (c < 0x10000) {
    out->push_back(static_cast<char>(0xe0 | (c >> 12)));
    out->push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3f)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3f)));
  } else {
    out->push_back(static_cast<char>(0xf0 | (c >> 18)));
    out->push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3f)));
    out->push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3f)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3f)));
  }
}

std::string EncodeUtf8(std::u32string_view s) {
  std::string out;
  for (char32_t c : s) AppendUtf8(c, &out);
  return out;
}

bool DecodeUtf8(std::string_view in, std::u32string* out) {
  for (size_t i = 0; i < in.size();) {
    const auto b = static_cast<unsigned char>(in[i]);
    int len = 0;
    char32_t c = 0;
    if (b < 0x80) {
      len = 1, c = b;
    } else if (b >= 0xc2 && b < 0xe0) {
      len = 2, c = b & 0x1f;
    } else if (b >= 0xe0 && b < 0xf0) {
      len = 3, c = b & 0x0f;
    } else if (b >= 0xf0 && b < 0xf5) {
      len = 4, c = b & 0x07;
    } else {
      return false;
    }
    if (i + len > in.size()) return false;
    for (int k = 1; k < len; ++k) {
      const auto t = static_cast<unsigned char>(in[i + k]);
      if ((t & 0xc0) != 0x80) return false;
      c = (c << 6) | (t & 0x3f);
    }
    if ((len == 3 && c < 0x800) || (len == 4 && (c < 0x10000 || c > 0x10ffff)) ||
        (c >= 0xd800 && c < 0xe000)) {
      return false;
    }
    out->push_back(c);
    i += len;
  }
  return true;
}

}  // namespace loom
