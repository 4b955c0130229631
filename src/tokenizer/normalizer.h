// tokenizer.json normalizers: NFC/NFD/NFKC/NFKD, Lowercase, Strip, Prepend, Replace, ByteLevel,
// Sequence. Any other type is rejected by name.
#pragma once

#include <memory>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "base/status.h"

namespace loom::tokenizer {

// Rewrites one piece of input text (valid UTF-8). Immutable; thread-safe.
class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual void Normalize(std::string* text) const = 0;
};

// `j` is the "normalizer" value of tokenizer.json; null gives a null pointer (no normalizer).
StatusOr<std::unique_ptr<Normalizer>> ParseNormalizer(const nlohmann::json& j);

}  // namespace loom::tokenizer
