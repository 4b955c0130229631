// Normalizers, each following the HF tokenizers component of the same name.
#include "tokenizer/normalizer.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <vector>

#include "tokenizer/json_limits.h"
#include "tokenizer/precompiled.h"
#include "tokenizer/regex.h"
#include "tokenizer/unicode.h"

namespace loom::tokenizer {

namespace {

using nlohmann::json;

Status TooLong(const char* name, size_t bytes, size_t max_bytes) {
  return ResourceExhausted(std::string("normalizer ") + name + ": output of " +
                           std::to_string(bytes) + " bytes exceeds the limit of " +
                           std::to_string(max_bytes) + " bytes (" +
                           std::to_string(kNormalizedGrowth) + " x input + " +
                           std::to_string(kNormalizedSlack) + ")");
}

// `n` rounded up to the next character boundary of `s` (at most s.size()).
size_t CharBoundaryAtOrAfter(const std::string& s, size_t n) {
  n = std::min(n, s.size());
  while (n < s.size() && (static_cast<uint8_t>(s[n]) & 0xC0) == 0x80) ++n;
  return n;
}

class UnicodeNormalizer final : public Normalizer {
 public:
  explicit UnicodeNormalizer(NormalForm form) : form_(form) {}
  Status Normalize(std::string* text, size_t max_bytes) const override {
    *text = tokenizer::Normalize(*text, form_);  // at most 18 code points per input one
    if (text->size() > max_bytes) return TooLong("NFC/NFD/NFKC/NFKD", text->size(), max_bytes);
    return OkStatus();
  }

 private:
  NormalForm form_;
};

class LowercaseNormalizer final : public Normalizer {
 public:
  Status Normalize(std::string* text, size_t max_bytes) const override {
    *text = Lowercase(*text);  // at most 3 code points per input one
    if (text->size() > max_bytes) return TooLong("Lowercase", text->size(), max_bytes);
    return OkStatus();
  }
};

// Same as HF Strip: removes leading / trailing characters with char::is_whitespace.
class StripNormalizer final : public Normalizer {
 public:
  StripNormalizer(bool left, bool right) : left_(left), right_(right) {}
  Status Normalize(std::string* text, size_t max_bytes) const override {
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
    return OkStatus();
  }
  Status NormalizeTracked(std::string* text, size_t max_bytes, size_t* head) const override {
    size_t lead = 0;  // whitespace bytes at the start, removed with their alignments
    while (left_ && lead < *head && lead < text->size()) {
      size_t next = lead;
      if (!IsWhitespace(NextCodePoint(*text, &next))) break;
      lead = next;
    }
    *head = lead < *head ? *head - lead : 0;
    return Normalize(text, max_bytes);
  }

 private:
  bool left_, right_;
};

// Same as HF Prepend: only a non-empty piece gets the prefix.
class PrependNormalizer final : public Normalizer {
 public:
  explicit PrependNormalizer(std::string prepend) : prepend_(std::move(prepend)) {}
  Status Normalize(std::string* text, size_t max_bytes) const override {
    if (text->empty()) return OkStatus();
    if (prepend_.size() > max_bytes || text->size() > max_bytes - prepend_.size()) {
      return TooLong("Prepend", text->size() + prepend_.size(), max_bytes);
    }
    text->insert(0, prepend_);
    return OkStatus();
  }

 private:
  std::string prepend_;
};

class ReplaceNormalizer final : public Normalizer {
 public:
  ReplaceNormalizer(Pattern pattern, std::string content)
      : pattern_(std::move(pattern)), content_(std::move(content)) {}
  Status Normalize(std::string* text, size_t max_bytes) const override {
    StatusOr<std::string> r = pattern_.ReplaceAll(*text, content_, max_bytes);
    if (!r.ok()) return Status(r.status().code(), "normalizer Replace: " + r.status().message());
    *text = std::move(r).value();
    return OkStatus();
  }
  // HF gives the content of a match the alignment of the whole match: a match that starts in
  // the head puts its content in the head.
  Status NormalizeTracked(std::string* text, size_t max_bytes, size_t* head) const override {
    if (*head == 0) return Normalize(text, max_bytes);
    std::vector<std::pair<size_t, size_t>> matches;
    StatusOr<std::string> r = pattern_.ReplaceAll(*text, content_, max_bytes, &matches);
    if (!r.ok()) return Status(r.status().code(), "normalizer Replace: " + r.status().message());
    size_t out_head = 0, pos = 0;
    for (const auto& [b, e] : matches) {
      if (b >= *head) break;
      out_head += b - pos + content_.size();
      pos = e;
    }
    *head = out_head + (pos < *head ? *head - pos : 0);
    *text = std::move(r).value();
    return OkStatus();
  }

 private:
  Pattern pattern_;
  std::string content_;
};

// Maps every byte to its GPT-2 printable character.
class ByteLevelNormalizer final : public Normalizer {
 public:
  Status Normalize(std::string* text, size_t max_bytes) const override {
    if (text->size() > max_bytes / 2) return TooLong("ByteLevel", text->size() * 2, max_bytes);
    std::string out;
    out.reserve(text->size() * 2);
    for (unsigned char b : *text) out += ByteToChar(b);
    *text = std::move(out);
    return OkStatus();
  }
};

// Same as HF Precompiled (SentencePiece's precompiled_charsmap).
class PrecompiledNormalizer final : public Normalizer {
 public:
  explicit PrecompiledNormalizer(PrecompiledCharsmap map) : map_(std::move(map)) {}
  Status Normalize(std::string* text, size_t max_bytes) const override {
    ASSIGN_OR_RETURN(*text, map_.Apply(*text, max_bytes));
    return OkStatus();
  }
  Status NormalizeTracked(std::string* text, size_t max_bytes, size_t* head) const override {
    *head = map_.HeadAfterApply(*text, *head);
    return Normalize(text, max_bytes);
  }

 private:
  PrecompiledCharsmap map_;
};

class SequenceNormalizer final : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> parts)
      : parts_(std::move(parts)) {}
  Status Normalize(std::string* text, size_t max_bytes) const override {
    // One bound for the whole chain (relative to the original input), so growth cannot compound.
    for (const auto& p : parts_) RETURN_IF_ERROR(p->Normalize(text, max_bytes));
    return OkStatus();
  }
  Status NormalizeTracked(std::string* text, size_t max_bytes, size_t* head) const override {
    for (const auto& p : parts_) RETURN_IF_ERROR(p->NormalizeTracked(text, max_bytes, head));
    return OkStatus();
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> parts_;
};

bool BoolField(const json& j, const char* key, bool fallback) {
  auto it = j.find(key);
  return it != j.end() && it->is_boolean() ? it->get<bool>() : fallback;
}

}  // namespace

// Normalizers that map each character to characters of their own, in order (NFC's compositions
// join a character with the ones after it): the head's characters normalized alone, rounded up
// to the character they ended in.
Status Normalizer::NormalizeTracked(std::string* text, size_t max_bytes, size_t* head) const {
  if (*head == 0) return Normalize(text, max_bytes);
  std::string first = text->substr(0, *head);
  RETURN_IF_ERROR(Normalize(&first, max_bytes));
  RETURN_IF_ERROR(Normalize(text, max_bytes));
  *head = CharBoundaryAtOrAfter(*text, first.size());
  return OkStatus();
}

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
  if (type == "Precompiled") {
    auto it = j.find("precompiled_charsmap");
    if (it == j.end() || !it->is_string()) {
      return InvalidArgument("normalizer Precompiled: missing string \"precompiled_charsmap\"");
    }
    ASSIGN_OR_RETURN(std::string bytes,
                     DecodeBase64(it->get<std::string>(), "normalizer Precompiled"));
    ASSIGN_OR_RETURN(PrecompiledCharsmap map,
                     PrecompiledCharsmap::Parse(bytes, "normalizer Precompiled"));
    return std::unique_ptr<Normalizer>(new PrecompiledNormalizer(std::move(map)));
  }
  if (type == "Sequence") {
    if (!j.contains("normalizers") || !j["normalizers"].is_array()) {
      return InvalidArgument("normalizer Sequence: missing array \"normalizers\"");
    }
    RETURN_IF_ERROR(CheckSequenceSize(j, "normalizer"));
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
