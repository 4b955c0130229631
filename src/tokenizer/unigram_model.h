// The Unigram model of tokenizer.json (SentencePiece unigram, T5-style): Viterbi over the
// vocab's pieces by score, unknown runs fused into unk_id, optional byte_fallback.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"
#include "tokenizer/bpe_model.h"
#include "tokenizer/model.h"

namespace loom::tokenizer {

// Immutable after load; thread-safe.
class UnigramModel : public Model {
 public:
  // `j` is the "model" value of tokenizer.json: {"type": "Unigram", "unk_id": int|null,
  // "vocab": [[piece, score], ...], "byte_fallback": bool}.
  static StatusOr<std::unique_ptr<UnigramModel>> FromJson(const nlohmann::json& j);

  // Same as HF Unigram::tokenize (encode_optimized + byte fallback of unknown runs).
  Status Tokenize(std::string_view word, std::vector<int32_t>* ids) const override;
  int32_t TokenToId(std::string_view token) const override;
  const std::string* IdToToken(int32_t id) const override;
  int32_t id_limit() const override { return static_cast<int32_t>(pieces_.size()); }

 private:
  // Byte trie of the pieces: children as sibling lists, `id` the piece ending here or -1.
  struct TrieNode {
    int32_t first_child = -1;
    int32_t next_sibling = -1;
    int32_t id = -1;
    uint8_t byte = 0;
  };
  UnigramModel() = default;
  void Insert(std::string_view piece, int32_t id);
  int32_t Child(int32_t node, uint8_t byte) const;

  std::vector<std::pair<std::string, double>> pieces_;
  StringMap<int32_t> token_to_id_;  // a repeated piece maps to its last id, as in HF
  std::vector<TrieNode> trie_;      // trie_[0] is the root
  int32_t unk_id_ = -1;
  double min_score_ = 0.0;
  bool byte_fallback_ = false;
  int32_t byte_ids_[256];
};

}  // namespace loom::tokenizer
