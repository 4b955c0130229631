// Normalizers, each following the HF tokenizers component of the same name.
#include "tokenizer/normalizer.h"

#include <nlohmann/json.hpp>
#include <vector>

#include "tokenizer/regex.h"
#include "tokenizer/unicode.h"

namespace loom::tokenizer {

namespace {

using nlohmann::json;

class UnicodeNormalizer final : public Normalizer {
 public:
  explicit UnicodeNormalizer(NormalForm form) : form_(form) {}
  void Normalize(std::string* text) const override { *text = tokenizer::Normalize(*text, form_); }

 private:
  NormalForm form_;
};

class LowercaseNormalizer final : public Normalizer {
 public:
  void Normalize(std::string* text) const override { *text = Lowercase(*text); }
};

// Same as HF Strip: removes leading / trailing characters with char::is_whitespace.
class StripNormalizer final : public Normalizer {
 public:
  StripNormalizer(bool left, bool right) : left_(left), right_(right) {}
  void Normalize(std::string* text) const override {
    const std::string& s = *text;
    size_t begin = 0, end = s.size();
    if (left_) {
      while (begin < end) {
        size_t next = begin;
        if (!IsWhitespace(NextCodePoint(s, &next))) break;
        begin = next;
      }
    }
    if (right_) {
      while (end > begin) {
        size_t start = end - 1;
        while (start > begin && (static_cast<uint8_t>(s[start]) & 0xC0) == 0x80) --start;
        size_t next = start;
        if (!IsWhitespace(NextCodePoint(s, &next))) break;
        end = start;
      }
    }
    *text = s.substr(begin, end - begin);
  }

 private:
  bool left_, right_;
};

// Same as HF Prepend: only a non-empty piece gets the prefix.
class PrependNormalizer final : public Normalizer {
 public:
  explicit PrependNormalizer(std::string prepend) : prepend_(std::move(prepend)) {}
  void Normalize(std::string* text) const override {
    if (!text->empty()) text->insert(0, prepend_);
  }

 private:
  std::string prepend_;
};

class ReplaceNormalizer final : public Normalizer {
 public:
  ReplaceNormalizer(Pattern pattern, std::string content)
      : pattern_(std::move(pattern)), content_(std::move(content)) {}
  void Normalize(std::string* text) const override { *text = pattern_.ReplaceAll(*text, content_); }

 private:
  Pattern pattern_;
  std::string content_;
};

// Maps every byte to its GPT-2 printable character.
class ByteLevelNormalizer final : public Normalizer {
 public:
  void Normalize(std::string* text) const override {
    std::string out;
    out.reserve(text->size() * 2);
    for (unsigned char b : *text) out += ByteToChar(b);
    *text = std::move(out);
  }
};

class SequenceNormalizer final : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> parts)
      : parts_(std::move(parts)) {}
  void Normalize(std::string* text) const override {
    for (const auto& p : parts_) p->Normalize(text);
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> parts_;
};

bool BoolField(const json& j, const char* key, bool fallback) {
  auto it = j.find(key);
  return it != j.end() && it->is_boolean() ? it->get<bool>() : fallback;
}

}  // namespace

StatusOr<std::unique_ptr<Normalizer>> ParseNormalizer(const json& j) {
  if (j.is_null()) return std::unique_ptr<Normalizer>();
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string()) {
    return InvalidArgument("normalizer: expected an object with a \"type\", got " + j.dump());
  }
  const std::string type = j["type"].get<std::string>();
  if (type == "NFC") return std::unique_ptr<Normalizer>(new UnicodeNormalizer(NormalForm::kNfc));
  if (type == "NFD") return std::unique_ptr<Normalizer>(new UnicodeNormalizer(NormalForm::kNfd));
  if (type == "NFKC") return std::unique_ptr<Normalizer>(new UnicodeNormalizer(NormalForm::kNfkc));
  if (type == "NFKD") return std::unique_ptr<Normalizer>(new UnicodeNormalizer(NormalForm::kNfkd));
  if (type == "Lowercase") return std::unique_ptr<Normalizer>(new LowercaseNormalizer());
  if (type == "ByteLevel") return std::unique_ptr<Normalizer>(new ByteLevelNormalizer());
  if (type == "Strip") {
    return std::unique_ptr<Normalizer>(
        new StripNormalizer(BoolField(j, "strip_left", true), BoolField(j, "strip_right", true)));
  }
  if (type == "Prepend") {
    if (!j.contains("prepend") || !j["prepend"].is_string()) {
      return InvalidArgument("normalizer Prepend: missing string field \"prepend\"");
    }
    return std::unique_ptr<Normalizer>(new PrependNormalizer(j["prepend"].get<std::string>()));
  }
  if (type == "Replace") {
    if (!j.contains("pattern") || !j.contains("content") || !j["content"].is_string()) {
      return InvalidArgument("normalizer Replace: needs \"pattern\" and string \"content\"");
    }
    ASSIGN_OR_RETURN(Pattern p, Pattern::FromJson(j["pattern"], "normalizer Replace"));
    return std::unique_ptr<Normalizer>(
        new ReplaceNormalizer(std::move(p), j["content"].get<std::string>()));
  }
  if (type == "Sequence") {
    if (!j.contains("normalizers") || !j["normalizers"].is_array()) {
      return InvalidArgument("normalizer Sequence: missing array \"normalizers\"");
    }
    std::vector<std::unique_ptr<Normalizer>> parts;
    for (const auto& item : j["normalizers"]) {
      ASSIGN_OR_RETURN(auto part, ParseNormalizer(item));
      if (part) parts.push_back(std::move(part));
    }
    return std::unique_ptr<Normalizer>(new SequenceNormalizer(std::move(parts)));
  }
  return InvalidArgument("normalizer type '" + type +
                         "' is not supported by loom (supported: NFC, NFD, NFKC, NFKD, Lowercase, "
                         "Strip, Prepend, Replace, ByteLevel, Sequence)");
}

}  // namespace loom::tokenizer
