// ParseModel: the "model" of tokenizer.json by its type (BPE or Unigram).
#include "tokenizer/model.h"

#include <nlohmann/json.hpp>

#include "tokenizer/bpe_model.h"
#include "tokenizer/unigram_model.h"

namespace loom::tokenizer {

StatusOr<std::unique_ptr<Model>> ParseModel(const nlohmann::json& j) {
  if (j.is_object() && j.contains("type") && j["type"] == "Unigram") {
    ASSIGN_OR_RETURN(std::unique_ptr<UnigramModel> m, UnigramModel::FromJson(j));
    return std::unique_ptr<Model>(std::move(m));
  }
  ASSIGN_OR_RETURN(std::unique_ptr<BpeModel> m, BpeModel::FromJson(j));
  return std::unique_ptr<Model>(std::move(m));
}

}  // namespace loom::tokenizer
