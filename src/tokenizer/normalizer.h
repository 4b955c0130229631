// tokenizer.json normalizers: NFC/NFD/NFKC/NFKD, Lowercase, Strip, Prepend, Replace, ByteLevel,
// Precompiled (SentencePiece charsmaps),
// Sequence. Any other type is rejected by name.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "base/status.h"

namespace loom::tokenizer {

// How far normalizing may grow a piece of text: a normalizer whose output exceeds
// kNormalizedGrowth × input + kNormalizedSlack bytes fails (40 chained Replace('' → 'ab')
// normalizers would otherwise grow text exponentially). Real pipelines stay under 4×.
inline constexpr size_t kNormalizedGrowth = 64;
inline constexpr size_t kNormalizedSlack = 4096;
inline size_t NormalizedLimit(size_t input_bytes) {
  return input_bytes > (SIZE_MAX - kNormalizedSlack) / kNormalizedGrowth
             ? SIZE_MAX
             : input_bytes * kNormalizedGrowth + kNormalizedSlack;
}

// Rewrites one piece of input text (valid UTF-8). Immutable; thread-safe.
class Normalizer {
 public:
  virtual ~Normalizer() = default;
  // kResourceExhausted naming the normalizer when its output would exceed `max_bytes` (see
  // NormalizedLimit), or when its regex gives up.
  virtual Status Normalize(std::string* text, size_t max_bytes) const = 0;
  // Normalize, also tracking `*head`: how many bytes at the start of the text HF's alignments tie
  // to the input's first character (offset 0); on entry for the input, on return for the output.
  // 0 when the text starts with characters of later input (a normalizer removed the first ones
  // outright: "\A +" → ""), and then Metaspace's prepend_scheme "first" does not prepend; but
  // "´" → " \u0301" → (strip) "\u0301" keeps the acute tied to offset 0, so it does. Characters
  // made from head characters stay in the head; 0 stays 0.
  virtual Status NormalizeTracked(std::string* text, size_t max_bytes, size_t* head) const;
};

// `j` is the "normalizer" value of tokenizer.json; null gives a null pointer (no normalizer).
StatusOr<std::unique_ptr<Normalizer>> ParseNormalizer(const nlohmann::json& j);

}  // namespace loom::tokenizer
