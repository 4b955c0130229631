// Pre-tokenizers, each following the HF tokenizers component of the same name (split semantics
// from NormalizedString::split: matches cover the piece, the behavior decides what is kept).
#include "tokenizer/json_limits.h"
#include "tokenizer/pre_tokenizer.h"

#include <nlohmann/json.hpp>
#include <algorithm>
#include <utility>

#include "tokenizer/regex.h"
#include "tokenizer/unicode.h"

namespace loom::tokenizer {

namespace {

using nlohmann::json;
using Ranges = std::vector<std::pair<size_t, size_t>>;

enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

struct Span {
  size_t begin, end;
  bool flag;  // is_match before the fold; "remove" after it
};

// Splits `piece` at `matches` (sorted, non-overlapping) as NormalizedString::split does.
void SplitPiece(const PreToken& piece, const Ranges& matches, bool invert, SplitBehavior behavior,
                std::vector<PreToken>* out) {
  const std::string& s = piece.text;
  std::vector<Span> spans;
  spans.reserve(matches.size() * 2 + 1);
  size_t prev = 0;
  for (const auto& [b, e] : matches) {
    if (prev != b) spans.push_back({prev, b, invert});
    spans.push_back({b, e, !invert});
    prev = e;
  }
  if (prev != s.size()) spans.push_back({prev, s.size(), invert});

  std::vector<Span> kept;
  kept.reserve(spans.size());
  bool previous_match = false;
  switch (behavior) {
    case SplitBehavior::kRemoved:
      kept = spans;
      break;
    case SplitBehavior::kIsolated:
      for (const Span& sp : spans) kept.push_back({sp.begin, sp.end, false});
      break;
    case SplitBehavior::kContiguous:
      for (const Span& sp : spans) {
        if (sp.flag == previous_match && !kept.empty()) {
          kept.back().end = sp.end;
        } else {
          kept.push_back({sp.begin, sp.end, false});
        }
        previous_match = sp.flag;
      }
      break;
    case SplitBehavior::kMergedWithPrevious:
      for (const Span& sp : spans) {
        if (sp.flag && !previous_match && !kept.empty()) {
          kept.back().end = sp.end;
        } else {
          kept.push_back({sp.begin, sp.end, false});
        }
        previous_match = sp.flag;
      }
      break;
    case SplitBehavior::kMergedWithNext:
      for (auto it = spans.rbegin(); it != spans.rend(); ++it) {
        if (it->flag && !previous_match && !kept.empty()) {
          kept.back().begin = it->begin;
        } else {
          kept.push_back({it->begin, it->end, false});
        }
        previous_match = it->flag;
      }
      std::reverse(kept.begin(), kept.end());
      break;
  }
  for (const Span& sp : kept) {
    if (sp.flag || sp.begin == sp.end) continue;
    out->push_back({s.substr(sp.begin, sp.end - sp.begin), piece.at_start && sp.begin == 0});
  }
}

// Each character satisfying `pred` is one match (HF's Pattern for Fn(char) -> bool).
template <typename Pred>
void CharMatches(const std::string& s, Pred pred, Ranges* out) {
  size_t pos = 0;
  while (pos < s.size()) {
    const size_t start = pos;
    const char32_t cp = NextCodePoint(s, &pos);
    if (pred(cp)) out->emplace_back(start, pos);
  }
}

template <typename Fn>
Status ForEachPiece(std::vector<PreToken>* pieces, Fn split) {
  std::vector<PreToken> out;
  out.reserve(pieces->size() * 2);
  for (const PreToken& p : *pieces) RETURN_IF_ERROR(split(p, &out));
  *pieces = std::move(out);
  return OkStatus();
}

size_t TotalBytes(const std::vector<PreToken>& pieces) {
  size_t total = 0;
  for (const PreToken& p : pieces) total += p.text.size();
  return total;
}

Status CheckTotal(const char* name, const std::vector<PreToken>& pieces, size_t max_bytes) {
  const size_t total = TotalBytes(pieces);
  if (total <= max_bytes) return OkStatus();
  return ResourceExhausted(std::string("pre_tokenizer ") + name + ": output of " +
                           std::to_string(total) + " bytes exceeds the limit of " +
                           std::to_string(max_bytes) + " bytes");
}

class SplitPreTokenizer final : public PreTokenizer {
 public:
  SplitPreTokenizer(Pattern pattern, SplitBehavior behavior, bool invert)
      : pattern_(std::move(pattern)), behavior_(behavior), invert_(invert) {}
  Status PreTokenize(std::vector<PreToken>* pieces, size_t) const override {
    Ranges m;
    return ForEachPiece(pieces, [&](const PreToken& p, std::vector<PreToken>* out) -> Status {
      m.clear();
      Status st = pattern_.FindAll(p.text, &m);
      if (!st.ok()) return Status(st.code(), "pre_tokenizer Split: " + st.message());
      SplitPiece(p, m, invert_, behavior_, out);
      return OkStatus();
    });
  }

 private:
  Pattern pattern_;
  SplitBehavior behavior_;
  bool invert_;
};

template <typename Pred>
class CharSplitPreTokenizer final : public PreTokenizer {
 public:
  CharSplitPreTokenizer(Pred pred, SplitBehavior behavior) : pred_(pred), behavior_(behavior) {}
  Status PreTokenize(std::vector<PreToken>* pieces, size_t) const override {
    Ranges m;
    return ForEachPiece(pieces, [&](const PreToken& p, std::vector<PreToken>* out) -> Status {
      m.clear();
      CharMatches(p.text, pred_, &m);
      SplitPiece(p, m, false, behavior_, out);
      return OkStatus();
    });
  }

 private:
  Pred pred_;
  SplitBehavior behavior_;
};

template <typename Pred>
std::unique_ptr<PreTokenizer> MakeCharSplit(Pred pred, SplitBehavior behavior) {
  return std::make_unique<CharSplitPreTokenizer<Pred>>(pred, behavior);
}

// Same as HF Whitespace: keeps the matches of \w+|[^\w\s]+ (regex-crate classes).
class WhitespacePreTokenizer final : public PreTokenizer {
 public:
  Status PreTokenize(std::vector<PreToken>* pieces, size_t) const override {
    return ForEachPiece(pieces, [](const PreToken& p, std::vector<PreToken>* out) -> Status {
      const std::string& s = p.text;
      size_t pos = 0;
      int run_kind = 0;  // 0 none, 1 word, 2 other
      size_t run_begin = 0;
      auto flush = [&](size_t end) {
        if (run_kind != 0 && end > run_begin) {
          out->push_back({s.substr(run_begin, end - run_begin), p.at_start && run_begin == 0});
        }
      };
      while (pos < s.size()) {
        const size_t start = pos;
        const char32_t cp = NextCodePoint(s, &pos);
        const int kind = IsWordChar(cp) ? 1 : IsWhitespace(cp) ? 0 : 2;
        if (kind != run_kind) {
          flush(start);
          run_kind = kind;
          run_begin = start;
        }
      }
      flush(s.size());
      return OkStatus();
    });
  }
};

class MetaspacePreTokenizer final : public PreTokenizer {
 public:
  enum class Prepend { kAlways, kFirst, kNever };
  MetaspacePreTokenizer(std::string replacement, Prepend prepend, bool split)
      : replacement_(std::move(replacement)), prepend_(prepend), split_(split) {}
  Status PreTokenize(std::vector<PreToken>* pieces, size_t max_bytes) const override {
    Ranges m;
    RETURN_IF_ERROR(ForEachPiece(pieces, [&](const PreToken& p, std::vector<PreToken>* out) -> Status {
      PreToken q;
      q.at_start = p.at_start;
      q.text.reserve(p.text.size() + replacement_.size());
      const bool starts = p.text.compare(0, replacement_.size(), replacement_) == 0 ||
                          (!p.text.empty() && p.text[0] == ' ');
      if (!starts && (prepend_ == Prepend::kAlways || (prepend_ == Prepend::kFirst && p.at_start))) {
        q.text = replacement_;
      }
      for (char c : p.text) {
        if (c == ' ') {
          q.text += replacement_;
        } else {
          q.text += c;
        }
      }
      if (!split_) {
        out->push_back(std::move(q));
        return OkStatus();
      }
      m.clear();
      size_t pos = 0;
      while ((pos = q.text.find(replacement_, pos)) != std::string::npos) {
        m.emplace_back(pos, pos + replacement_.size());
        pos += replacement_.size();
      }
      SplitPiece(q, m, false, SplitBehavior::kMergedWithNext, out);
      return OkStatus();
    }));
    return CheckTotal("Metaspace", *pieces, max_bytes);
  }

 private:
  std::string replacement_;
  Prepend prepend_;
  bool split_;
};

constexpr const char* kByteLevelPattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

class ByteLevelPreTokenizer final : public PreTokenizer {
 public:
  ByteLevelPreTokenizer(bool add_prefix_space, std::unique_ptr<Regex> regex)
      : add_prefix_space_(add_prefix_space), regex_(std::move(regex)) {}
  Status PreTokenize(std::vector<PreToken>* pieces, size_t max_bytes) const override {
    std::vector<PreToken> split;
    split.reserve(pieces->size() * 4);
    Ranges m;
    for (PreToken& p : *pieces) {
      // Not insert(0, " "): GCC 12 warns falsely there (-Wrestrict).
      if (add_prefix_space_ && (p.text.empty() || p.text[0] != ' ')) p.text = " " + p.text;
      if (!regex_) {
        split.push_back(std::move(p));
        continue;
      }
      m.clear();
      Status st = regex_->FindAll(p.text, &m);
      if (!st.ok()) return Status(st.code(), "pre_tokenizer ByteLevel: " + st.message());
      SplitPiece(p, m, false, SplitBehavior::kIsolated, &split);
    }
    // Each byte becomes at most 2 bytes: refuse before mapping when that could pass the bound.
    const size_t total = TotalBytes(split);
    if (total > max_bytes / 2) {
      return ResourceExhausted("pre_tokenizer ByteLevel: output of up to " +
                               std::to_string(total * 2) + " bytes exceeds the limit of " +
                               std::to_string(max_bytes) + " bytes");
    }
    for (PreToken& p : split) {
      std::string mapped;
      mapped.reserve(p.text.size() * 2);
      for (unsigned char b : p.text) mapped += ByteToChar(b);
      p.text = std::move(mapped);
    }
    *pieces = std::move(split);
    return OkStatus();
  }

 private:
  bool add_prefix_space_;
  std::unique_ptr<Regex> regex_;  // null when use_regex is false
};

class SequencePreTokenizer final : public PreTokenizer {
 public:
  explicit SequencePreTokenizer(std::vector<std::unique_ptr<PreTokenizer>> parts)
      : parts_(std::move(parts)) {}
  Status PreTokenize(std::vector<PreToken>* pieces, size_t max_bytes) const override {
    for (const auto& p : parts_) {
      RETURN_IF_ERROR(p->PreTokenize(pieces, max_bytes));
      RETURN_IF_ERROR(CheckTotal("Sequence", *pieces, max_bytes));
    }
    return OkStatus();
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> parts_;
};

bool BoolField(const json& j, const char* key, bool fallback) {
  auto it = j.find(key);
  return it != j.end() && it->is_boolean() ? it->get<bool>() : fallback;
}

StatusOr<SplitBehavior> ParseBehavior(const json& j, const std::string& where) {
  auto it = j.find("behavior");
  if (it == j.end() || !it->is_string()) return SplitBehavior::kIsolated;
  const std::string b = it->get<std::string>();
  if (b == "Removed") return SplitBehavior::kRemoved;
  if (b == "Isolated") return SplitBehavior::kIsolated;
  if (b == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (b == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (b == "Contiguous") return SplitBehavior::kContiguous;
  return InvalidArgument(where + ": unknown behavior '" + b + "'");
}

}  // namespace

StatusOr<std::unique_ptr<PreTokenizer>> ParsePreTokenizer(const json& j) {
  if (j.is_null()) return std::unique_ptr<PreTokenizer>();
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string()) {
    return InvalidArgument("pre_tokenizer: expected an object with a \"type\", got " + j.dump());
  }
  const std::string type = j["type"].get<std::string>();
  if (type == "ByteLevel") {
    std::unique_ptr<Regex> regex;
    if (BoolField(j, "use_regex", true)) {
      ASSIGN_OR_RETURN(regex, Regex::Compile(kByteLevelPattern));
    }
    return std::unique_ptr<PreTokenizer>(
        new ByteLevelPreTokenizer(BoolField(j, "add_prefix_space", true), std::move(regex)));
  }
  if (type == "Split") {
    if (!j.contains("pattern")) return InvalidArgument("pre_tokenizer Split: missing \"pattern\"");
    ASSIGN_OR_RETURN(Pattern p, Pattern::FromJson(j["pattern"], "pre_tokenizer Split"));
    ASSIGN_OR_RETURN(SplitBehavior b, ParseBehavior(j, "pre_tokenizer Split"));
    return std::unique_ptr<PreTokenizer>(
        new SplitPreTokenizer(std::move(p), b, BoolField(j, "invert", false)));
  }
  if (type == "Metaspace") {
    std::string replacement = "\xE2\x96\x81";
    if (j.contains("replacement") && j["replacement"].is_string()) {
      replacement = j["replacement"].get<std::string>();
    }
    size_t n = 0;
    NextCodePoint(replacement, &n);
    if (replacement.empty() || n != replacement.size()) {
      return InvalidArgument("pre_tokenizer Metaspace: replacement must be one character");
    }
    auto prepend = MetaspacePreTokenizer::Prepend::kAlways;
    if (j.contains("prepend_scheme") && j["prepend_scheme"].is_string()) {
      const std::string s = j["prepend_scheme"].get<std::string>();
      if (s == "first") {
        prepend = MetaspacePreTokenizer::Prepend::kFirst;
      } else if (s == "never") {
        prepend = MetaspacePreTokenizer::Prepend::kNever;
      } else if (s != "always") {
        return InvalidArgument("pre_tokenizer Metaspace: unknown prepend_scheme '" + s + "'");
      }
    } else if (!BoolField(j, "add_prefix_space", true)) {
      prepend = MetaspacePreTokenizer::Prepend::kNever;
    }
    return std::unique_ptr<PreTokenizer>(
        new MetaspacePreTokenizer(replacement, prepend, BoolField(j, "split", true)));
  }
  if (type == "Digits") {
    return BoolField(j, "individual_digits", false)
               ? MakeCharSplit(IsNumeric, SplitBehavior::kIsolated)
               : MakeCharSplit(IsNumeric, SplitBehavior::kContiguous);
  }
  if (type == "Punctuation") {
    ASSIGN_OR_RETURN(SplitBehavior b, ParseBehavior(j, "pre_tokenizer Punctuation"));
    return MakeCharSplit(IsPunctuation, b);
  }
  if (type == "Whitespace") return std::unique_ptr<PreTokenizer>(new WhitespacePreTokenizer());
  if (type == "WhitespaceSplit") return MakeCharSplit(IsWhitespace, SplitBehavior::kRemoved);
  if (type == "CharDelimiterSplit") {
    std::string d = j.contains("delimiter") && j["delimiter"].is_string()
                        ? j["delimiter"].get<std::string>()
                        : std::string();
    size_t n = 0;
    if (d.empty() || (NextCodePoint(d, &n), n != d.size())) {
      return InvalidArgument("pre_tokenizer CharDelimiterSplit: delimiter must be one character");
    }
    n = 0;
    const char32_t cp = NextCodePoint(d, &n);
    return MakeCharSplit([cp](char32_t c) { return c == cp; }, SplitBehavior::kRemoved);
  }
  if (type == "Sequence") {
    if (!j.contains("pretokenizers") || !j["pretokenizers"].is_array()) {
      return InvalidArgument("pre_tokenizer Sequence: missing array \"pretokenizers\"");
    }
    RETURN_IF_ERROR(CheckSequenceSize(j, "pre_tokenizer"));
    std::vector<std::unique_ptr<PreTokenizer>> parts;
    for (const auto& item : j["pretokenizers"]) {
      ASSIGN_OR_RETURN(auto part, ParsePreTokenizer(item));
      if (part) parts.push_back(std::move(part));
    }
    return std::unique_ptr<PreTokenizer>(new SequencePreTokenizer(std::move(parts)));
  }
  return InvalidArgument("pre_tokenizer type '" + type +
                         "' is not supported by loom (supported: ByteLevel, Split, Metaspace, "
                         "Digits, Punctuation, Whitespace, WhitespaceSplit, CharDelimiterSplit, "
                         "Sequence)");
}

}  // namespace loom::tokenizer
