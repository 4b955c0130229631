// Unigram model: load from tokenizer.json and HF tokenizers' models/unigram encode_optimized.
#include "tokenizer/unigram_model.h"

#include <cmath>
#include <cstdio>
#include <limits>
#include <nlohmann/json.hpp>

#include "tokenizer/cancel.h"
#include "tokenizer/unicode.h"

namespace loom::tokenizer {

namespace {

using nlohmann::json;

constexpr double kUnkPenalty = 10.0;  // HF K_UNK_PENALTY (SentencePiece's too)

}  // namespace

StatusOr<std::unique_ptr<UnigramModel>> UnigramModel::FromJson(const json& j) {
  if (!j.is_object()) return InvalidArgument("model Unigram: expected an object");
  auto vocab_it = j.find("vocab");
  if (vocab_it == j.end() || !vocab_it->is_array()) {
    return InvalidArgument("model Unigram: missing list \"vocab\"");
  }
  const json& vocab = *vocab_it;
  if (vocab.size() > static_cast<size_t>(kMaxTokenId) + 1) {
    return InvalidArgument("model Unigram: vocab has " + std::to_string(vocab.size()) +
                           " entries (at most " + std::to_string(kMaxTokenId + 1) + ")");
  }
  std::unique_ptr<UnigramModel> m(new UnigramModel());
  m->pieces_.reserve(vocab.size());
  m->token_to_id_.reserve(vocab.size());
  m->trie_.emplace_back();
  m->min_score_ = std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < vocab.size(); ++i) {
    const json& item = vocab[i];
    if (!item.is_array() || item.size() != 2 || !item[0].is_string() || !item[1].is_number()) {
      return InvalidArgument("model Unigram: vocab[" + std::to_string(i) +
                             "] must be [piece, score], got " + item.dump());
    }
    const double score = item[1].get<double>();
    if (!std::isfinite(score)) {
      return InvalidArgument("model Unigram: vocab[" + std::to_string(i) + "] score is not finite");
    }
    std::string piece = item[0].get<std::string>();
    if (piece.size() > kMaxPieceBytes) {
      return InvalidArgument("model Unigram: vocab[" + std::to_string(i) + "] is a piece of " +
                             std::to_string(piece.size()) + " bytes, above the limit of " +
                             std::to_string(kMaxPieceBytes));
    }
    const auto id = static_cast<int32_t>(i);
    m->token_to_id_[piece] = id;
    m->min_score_ = std::min(m->min_score_, score);
    m->pieces_.emplace_back(std::move(piece), score);
  }
  // The trie maps each piece to the id token_to_id_ gives it (the last of repeated pieces).
  for (const auto& [piece, id] : m->token_to_id_) m->Insert(piece, id);
  auto unk = j.find("unk_id");
  if (unk != j.end() && !unk->is_null()) {
    if (!unk->is_number_integer() || unk->get<int64_t>() < 0 ||
        unk->get<int64_t>() >= static_cast<int64_t>(vocab.size())) {
      return InvalidArgument("model Unigram: unk_id " + unk->dump() + " is not an id of the " +
                             std::to_string(vocab.size()) + "-entry vocab");
    }
    m->unk_id_ = static_cast<int32_t>(unk->get<int64_t>());
  }
  auto bf = j.find("byte_fallback");
  m->byte_fallback_ = bf != j.end() && bf->is_boolean() && bf->get<bool>();
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    m->byte_ids_[b] = m->TokenToId(name);
  }
  return m;
}

int32_t UnigramModel::Child(int32_t node, uint8_t byte) const {
  for (int32_t c = trie_[node].first_child; c >= 0; c = trie_[c].next_sibling) {
    if (trie_[c].byte == byte) return c;
  }
  return -1;
}

void UnigramModel::Insert(std::string_view piece, int32_t id) {
  if (piece.empty()) return;  // an empty piece never matches (HF's trie needs one byte)
  int32_t node = 0;
  for (unsigned char b : piece) {
    int32_t c = Child(node, b);
    if (c < 0) {
      c = static_cast<int32_t>(trie_.size());
      TrieNode n;
      n.byte = b;
      n.next_sibling = trie_[node].first_child;
      trie_.push_back(n);
      trie_[node].first_child = c;
    }
    node = c;
  }
  trie_[node].id = id;
}

int32_t UnigramModel::TokenToId(std::string_view token) const {
  auto it = token_to_id_.find(token);
  return it == token_to_id_.end() ? -1 : it->second;
}

const std::string* UnigramModel::IdToToken(int32_t id) const {
  if (id < 0 || id >= id_limit()) return nullptr;
  return &pieces_[id].first;
}

Status UnigramModel::Tokenize(std::string_view word, std::vector<int32_t>* ids) const {
  if (word.empty()) return OkStatus();
  struct Best {
    double score = 0.0;
    int32_t start = -1;  // -1: not reached yet
    int32_t id = 0;
  };
  const size_t size = word.size();
  // The lattice keeps each node's start as int32.
  if (size > static_cast<size_t>(INT32_MAX)) {
    return InvalidArgument("model Unigram: a word of " + std::to_string(size) +
                           " bytes is too long to encode");
  }
  const double unk_score = min_score_ - kUnkPenalty;
  std::vector<Best> best(size + 1);
  size_t start = 0;
  while (start < size) {
    if (EncodeCancelled()) return EncodeCancelledError("a unigram piece");
    const double base = best[start].score;
    const size_t mblen =
        std::min<size_t>(Utf8Length(static_cast<uint8_t>(word[start])), size - start);
    bool has_single = false;
    int32_t node = 0;
    for (size_t end = start; end < size; ++end) {
      node = Child(node, static_cast<uint8_t>(word[end]));
      if (node < 0) break;
      const int32_t id = trie_[node].id;
      if (id < 0) continue;
      Best& target = best[end + 1];
      const double candidate = pieces_[id].second + base;
      if (target.start < 0 || candidate > target.score) {
        target = {candidate, static_cast<int32_t>(start), id};
      }
      if (end + 1 - start == mblen) has_single = true;
    }
    if (!has_single) {
      if (unk_id_ < 0) {
        return InvalidArgument(
            "model Unigram: the text has a character no piece covers and the "
            "model has no unk_id");
      }
      Best& target = best[start + mblen];
      const double candidate = unk_score + base;
      if (target.start < 0 || candidate > target.score) {
        target = {candidate, static_cast<int32_t>(start), unk_id_};
      }
    }
    start += mblen;
  }
  // Backtrack; runs of unk nodes become one piece (fuse_unk is always on in HF's Unigram).
  std::vector<std::pair<size_t, size_t>> spans;  // [begin, end) byte ranges, last first
  size_t end = size;
  size_t unk_begin = 0, unk_end = 0;
  bool in_unk = false;
  while (end > 0) {
    const Best& node = best[end];
    const auto begin = static_cast<size_t>(node.start);
    if (unk_id_ >= 0 && node.id == unk_id_) {
      if (!in_unk) unk_end = end;
      in_unk = true;
      unk_begin = begin;
    } else {
      if (in_unk) spans.emplace_back(unk_begin, unk_end);
      in_unk = false;
      spans.emplace_back(begin, end);
    }
    end = begin;
  }
  if (in_unk) spans.emplace_back(unk_begin, unk_end);
  for (auto it = spans.rbegin(); it != spans.rend(); ++it) {
    const std::string_view piece = word.substr(it->first, it->second - it->first);
    const int32_t id = TokenToId(piece);
    if (id >= 0) {
      ids->push_back(id);
      continue;
    }
    if (byte_fallback_) {
      bool all = true;
      for (unsigned char b : piece) all &= byte_ids_[b] >= 0;
      if (all) {
        for (unsigned char b : piece) ids->push_back(byte_ids_[b]);
        continue;
      }
    }
    ids->push_back(unk_id_);  // only unk runs get here, so unk_id_ >= 0
  }
  return OkStatus();
}

}  // namespace loom::tokenizer
