// tokenizer.json pre-tokenizers: ByteLevel, Split, Metaspace, Digits, Punctuation, Whitespace,
// WhitespaceSplit, CharDelimiterSplit, Sequence. Any other type is rejected by name.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "base/status.h"

namespace loom::tokenizer {

// One piece of text on its way to the model. `at_start`: the piece begins at offset 0 of the
// original input (what Metaspace's prepend_scheme "first" looks at).
struct PreToken {
  std::string text;
  bool at_start = false;
};

// Splits (and may rewrite) pieces. Immutable; thread-safe.
class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Replaces `pieces` with their splits; empty pieces are dropped. kResourceExhausted when a
  // regex gives up (catastrophic backtracking) or the pieces would exceed `max_bytes` in all
  // (a Sequence of ByteLevel pre-tokenizers doubles the text at each step).
  virtual Status PreTokenize(std::vector<PreToken>* pieces, size_t max_bytes) const = 0;
};

// `j` is the "pre_tokenizer" value of tokenizer.json; null gives a null pointer.
StatusOr<std::unique_ptr<PreTokenizer>> ParsePreTokenizer(const nlohmann::json& j);

}  // namespace loom::tokenizer
