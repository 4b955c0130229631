// The model stage of a tokenizer (BPE or Unigram): one pre-tokenized word → ids, and the vocab.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace loom::tokenizer {

// Immutable after load (a model may keep an internally locked cache); thread-safe.
class Model {
 public:
  virtual ~Model() = default;
  // Appends the ids of one pre-tokenized word.
  virtual Status Tokenize(std::string_view word, std::vector<int32_t>* ids) const = 0;
  // -1 when absent.
  virtual int32_t TokenToId(std::string_view token) const = 0;
  // Null when the id has no token.
  virtual const std::string* IdToToken(int32_t id) const = 0;
  // One past the largest id.
  virtual int32_t id_limit() const = 0;
};

// `j` is the "model" value of tokenizer.json: BPE (also when "type" is absent and "merges" is
// present) or Unigram; any other type is rejected by name.
StatusOr<std::unique_ptr<Model>> ParseModel(const nlohmann::json& j);

}  // namespace loom::tokenizer
