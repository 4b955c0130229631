// tokenizer.json post-processors (what add_special_tokens adds): TemplateProcessing, ByteLevel,
// RobertaProcessing, BertProcessing, Sequence. Any other type is rejected by name.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "base/status.h"

namespace loom::tokenizer {

// Adds the special tokens of a single sequence. Immutable; thread-safe.
class PostProcessor {
 public:
  virtual ~PostProcessor() = default;
  virtual void AddSpecialTokens(std::vector<int32_t>* ids) const = 0;
};

// `j` is the "post_processor" value of tokenizer.json; null gives a null pointer.
StatusOr<std::unique_ptr<PostProcessor>> ParsePostProcessor(const nlohmann::json& j);

// `bos_id` $A `eos_id` (-1 for none): what RobertaProcessing / BertProcessing do.
std::unique_ptr<PostProcessor> MakeBosEosPostProcessor(int32_t bos_id, int32_t eos_id);

}  // namespace loom::tokenizer
