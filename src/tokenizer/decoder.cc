// Decoders, each following the HF tokenizers component of the same name.
#include "tokenizer/json_limits.h"
#include "tokenizer/decoder.h"

#include <nlohmann/json.hpp>

#include "tokenizer/jinja/utf8.h"
#include "tokenizer/regex.h"
#include "tokenizer/unicode.h"

namespace loom::tokenizer {

namespace {

using nlohmann::json;

// Maps each token's characters back to bytes (a token with a character outside the table keeps
// its own bytes), then decodes the whole as lossy UTF-8 into one string.
class ByteLevelDecoder final : public Decoder {
 public:
  void DecodeChain(std::vector<std::string>* tokens, size_t max_bytes) const override {
    std::string bytes;
    for (const std::string& t : *tokens) {
      const size_t mark = bytes.size();
      size_t pos = 0;
      bool all = true;
      while (pos < t.size()) {
        const int b = CharToByte(NextCodePoint(t, &pos));
        if (b < 0) {
          all = false;
          break;
        }
        bytes.push_back(static_cast<char>(b));
      }
      if (!all) {
        bytes.resize(mark);
        bytes += t;
      }
    }
    tokens->assign(1, Utf8Lossy(bytes));
  }
};

class MetaspaceDecoder final : public Decoder {
 public:
  MetaspaceDecoder(std::string replacement, bool strip_first)
      : replacement_(std::move(replacement)), strip_first_(strip_first) {}
  void DecodeChain(std::vector<std::string>* tokens, size_t max_bytes) const override {
    for (size_t i = 0; i < tokens->size(); ++i) {
      std::string& t = (*tokens)[i];
      std::string out;
      out.reserve(t.size());
      size_t pos = 0;
      while (pos < t.size()) {
        if (t.compare(pos, replacement_.size(), replacement_) == 0) {
          // Same as HF: in the first token every replacement character is dropped.
          if (!(i == 0 && strip_first_)) out += ' ';
          pos += replacement_.size();
        } else {
          out += t[pos++];
        }
      }
      t = std::move(out);
    }
  }

 private:
  std::string replacement_;
  bool strip_first_;
};

// Runs of <0xNN> tokens become their bytes when those are valid UTF-8, else one U+FFFD per byte.
class ByteFallbackDecoder final : public Decoder {
 public:
  void DecodeChain(std::vector<std::string>* tokens, size_t max_bytes) const override {
    std::vector<std::string> out;
    out.reserve(tokens->size());
    std::string bytes;
    auto flush = [&] {
      if (bytes.empty()) return;
      if (IsValidUtf8(bytes)) {
        out.push_back(bytes);
      } else {
        for (size_t i = 0; i < bytes.size(); ++i) out.emplace_back("\xEF\xBF\xBD");
      }
      bytes.clear();
    };
    for (std::string& t : *tokens) {
      int byte = -1;
      if (t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>') byte = ParseHexByte(t);
      if (byte >= 0) {
        bytes.push_back(static_cast<char>(byte));
      } else {
        flush();
        out.push_back(std::move(t));
      }
    }
    flush();
    *tokens = std::move(out);
  }

 private:
  static int ParseHexByte(const std::string& t) {
    int v = 0;
    for (int k = 3; k < 5; ++k) {
      const char c = t[k];
      int d;
      if (c >= '0' && c <= '9') {
        d = c - '0';
      } else if ((c | 0x20) >= 'a' && (c | 0x20) <= 'f') {
        d = (c | 0x20) - 'a' + 10;
      } else {
        return -1;
      }
      v = v * 16 + d;
    }
    return v;
  }
};

class FuseDecoder final : public Decoder {
 public:
  void DecodeChain(std::vector<std::string>* tokens, size_t max_bytes) const override {
    std::string all;
    for (const std::string& t : *tokens) all += t;
    tokens->assign(1, std::move(all));
  }
};

// Removes up to `start` leading and `stop` trailing `content` characters from each token.
class StripDecoder final : public Decoder {
 public:
  StripDecoder(char32_t content, size_t start, size_t stop)
      : content_(content), start_(start), stop_(stop) {}
  void DecodeChain(std::vector<std::string>* tokens, size_t max_bytes) const override {
    for (std::string& t : *tokens) {
      std::vector<std::pair<size_t, char32_t>> chars;  // (byte offset, code point)
      size_t pos = 0;
      while (pos < t.size()) {
        const size_t at = pos;
        chars.emplace_back(at, NextCodePoint(t, &pos));
      }
      size_t start_cut = 0;
      for (size_t i = 0; i < std::min(start_, chars.size()); ++i) {
        if (chars[i].second != content_) break;
        start_cut = i + 1;
      }
      size_t stop_cut = chars.size();
      for (size_t i = 0; i < std::min(stop_, chars.size()); ++i) {
        const size_t index = chars.size() - i - 1;
        if (chars[index].second != content_) break;
        stop_cut = index;
      }
      if (stop_cut < start_cut) stop_cut = start_cut;
      const size_t b = start_cut < chars.size() ? chars[start_cut].first : t.size();
      const size_t e = stop_cut < chars.size() ? chars[stop_cut].first : t.size();
      t = t.substr(b, e - b);
    }
  }

 private:
  char32_t content_;
  size_t start_, stop_;
};

class ReplaceDecoder final : public Decoder {
 public:
  ReplaceDecoder(Pattern pattern, std::string content)
      : pattern_(std::move(pattern)), content_(std::move(content)) {}
  void DecodeChain(std::vector<std::string>* tokens, size_t max_bytes) const override {
    size_t total = 0;
    for (const std::string& t : *tokens) total += t.size();
    for (std::string& t : *tokens) {
      const size_t others = total - t.size();
      if (others >= max_bytes) break;
      StatusOr<std::string> r = pattern_.ReplaceAll(t, content_, max_bytes - others);
      if (!r.ok()) continue;  // over the bound, or the regex gave up: the token stays as is
      total = others + r->size();
      t = std::move(r).value();
    }
  }

 private:
  Pattern pattern_;
  std::string content_;
};

// Same as HF BPEDecoder: the suffix becomes a space, except on the last token.
class BpeSuffixDecoder final : public Decoder {
 public:
  explicit BpeSuffixDecoder(std::string suffix) : suffix_(std::move(suffix)) {}
  void DecodeChain(std::vector<std::string>* tokens, size_t max_bytes) const override {
    for (size_t i = 0; i < tokens->size(); ++i) {
      const std::string replacement = i + 1 == tokens->size() ? "" : " ";
      std::string& t = (*tokens)[i];
      std::string out;
      size_t pos = 0, found;
      while (!suffix_.empty() && (found = jinja::FindSubstring(t, suffix_, pos)) != std::string::npos) {
        out.append(t, pos, found - pos);
        out += replacement;
        pos = found + suffix_.size();
      }
      out.append(t, pos);
      t = std::move(out);
    }
  }

 private:
  std::string suffix_;
};

class SequenceDecoder final : public Decoder {
 public:
  explicit SequenceDecoder(std::vector<std::unique_ptr<Decoder>> parts)
      : parts_(std::move(parts)) {}
  void DecodeChain(std::vector<std::string>* tokens, size_t max_bytes) const override {
    for (const auto& p : parts_) p->DecodeChain(tokens, max_bytes);
  }

 private:
  std::vector<std::unique_ptr<Decoder>> parts_;
};

StatusOr<char32_t> OneChar(const json& j, const char* key, const std::string& fallback,
                           const std::string& where) {
  const std::string s = j.contains(key) && j[key].is_string() ? j[key].get<std::string>()
                                                              : fallback;
  size_t pos = 0;
  if (s.empty()) return InvalidArgument(where + ": \"" + key + "\" must be one character");
  const char32_t cp = NextCodePoint(s, &pos);
  if (pos != s.size()) return InvalidArgument(where + ": \"" + key + "\" must be one character");
  return cp;
}

}  // namespace

StatusOr<std::unique_ptr<Decoder>> ParseDecoder(const json& j) {
  if (j.is_null()) return std::unique_ptr<Decoder>();
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string()) {
    return InvalidArgument("decoder: expected an object with a \"type\", got " + j.dump());
  }
  const std::string type = j["type"].get<std::string>();
  if (type == "ByteLevel") return std::unique_ptr<Decoder>(new ByteLevelDecoder());
  if (type == "ByteFallback") return std::unique_ptr<Decoder>(new ByteFallbackDecoder());
  if (type == "Fuse") return std::unique_ptr<Decoder>(new FuseDecoder());
  if (type == "Metaspace") {
    ASSIGN_OR_RETURN(char32_t cp, OneChar(j, "replacement", "\xE2\x96\x81", "decoder Metaspace"));
    std::string replacement;
    AppendUtf8(cp, &replacement);
    bool strip_first = true;
    if (j.contains("prepend_scheme") && j["prepend_scheme"].is_string()) {
      strip_first = j["prepend_scheme"].get<std::string>() != "never";
    } else if (j.contains("add_prefix_space") && j["add_prefix_space"].is_boolean()) {
      strip_first = j["add_prefix_space"].get<bool>();
    }
    return std::unique_ptr<Decoder>(new MetaspaceDecoder(replacement, strip_first));
  }
  if (type == "Strip") {
    ASSIGN_OR_RETURN(char32_t cp, OneChar(j, "content", " ", "decoder Strip"));
    size_t ends[2] = {0, 0};
    const char* keys[2] = {"start", "stop"};
    for (int i = 0; i < 2; ++i) {
      auto it = j.find(keys[i]);
      if (it == j.end() || it->is_null()) continue;
      if (!it->is_number_unsigned() && !(it->is_number_integer() && it->get<int64_t>() >= 0)) {
        return InvalidArgument(std::string("decoder Strip: \"") + keys[i] +
                               "\" must be a non-negative integer, got " + it->dump());
      }
      ends[i] = it->get<size_t>();
    }
    return std::unique_ptr<Decoder>(new StripDecoder(cp, ends[0], ends[1]));
  }
  if (type == "Replace") {
    if (!j.contains("pattern") || !j.contains("content") || !j["content"].is_string()) {
      return InvalidArgument("decoder Replace: needs \"pattern\" and string \"content\"");
    }
    ASSIGN_OR_RETURN(Pattern p, Pattern::FromJson(j["pattern"], "decoder Replace"));
    return std::unique_ptr<Decoder>(new ReplaceDecoder(std::move(p), j["content"].get<std::string>()));
  }
  if (type == "BPEDecoder") {
    auto it = j.find("suffix");
    if (it != j.end() && !it->is_string()) {
      return InvalidArgument("decoder BPEDecoder: \"suffix\" must be a string");
    }
    return std::unique_ptr<Decoder>(
        new BpeSuffixDecoder(it != j.end() ? it->get<std::string>() : std::string("</w>")));
  }
  if (type == "Sequence") {
    if (!j.contains("decoders") || !j["decoders"].is_array()) {
      return InvalidArgument("decoder Sequence: missing array \"decoders\"");
    }
    RETURN_IF_ERROR(CheckSequenceSize(j, "decoder"));
    std::vector<std::unique_ptr<Decoder>> parts;
    for (const auto& item : j["decoders"]) {
      ASSIGN_OR_RETURN(auto part, ParseDecoder(item));
      if (part) parts.push_back(std::move(part));
    }
    return std::unique_ptr<Decoder>(new SequenceDecoder(std::move(parts)));
  }
  return InvalidArgument("decoder type '" + type +
                         "' is not supported by loom (supported: ByteLevel, Metaspace, "
                         "ByteFallback, Fuse, Strip, Replace, BPEDecoder, Sequence)");
}

}  // namespace loom::tokenizer
