// The BPE model of tokenizer.json: vocab, merges (both serialized forms), byte_fallback,
// unk_token/fuse_unk, continuing_subword_prefix, end_of_word_suffix, ignore_merges.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "base/status.h"
#include "tokenizer/model.h"

namespace loom::tokenizer {

// Largest token id accepted anywhere (vocab, added tokens, post-processor): ids size tables, so
// an id of 2e9 in a file must not become a 2e9-entry vector. 2^24 is 64× the largest real vocab.
inline constexpr int32_t kMaxTokenId = (1 << 24) - 1;
// Longest Unigram / SentencePiece piece accepted, in bytes (SentencePiece trains at most 16
// characters by default; real vocabularies stay far below). Encoding walks the piece trie up to
// the longest piece from every position, and converting a tokenizer.model splits every piece at
// every point: a 200,000-byte piece made either take about a minute.
inline constexpr size_t kMaxPieceBytes = 256;
// A vocab's ids may leave gaps, but its largest id stays below this many times its entry count
// (plus kVocabIdSlack): a 10-entry vocab cannot size a table for id 16M.
inline constexpr int64_t kVocabIdSparsity = 64;
inline constexpr int64_t kVocabIdSlack = 65536;

// The per-model cache of words already merged: at most this many words, and this many bytes
// counted per word as its bytes, its ids' bytes and kBpeCacheEntryBytes of bookkeeping (a hash
// node, its string and vector headers). Words of 256 bytes or more are never cached. By count
// alone, 131,072 words of 255 bytes each merged into ~255 ids held ~180 MB.
inline constexpr size_t kBpeCacheMaxWords = size_t{1} << 17;
inline constexpr size_t kBpeCacheMaxBytes = size_t{16} << 20;
inline constexpr size_t kBpeCacheEntryBytes = 96;

// Heterogeneous lookup (string_view keys) for string-keyed hash maps.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
template <typename V>
using StringMap = std::unordered_map<std::string, V, StringHash, std::equal_to<>>;

// Thread-safe: the tables are immutable after load; the per-word cache has its own mutex.
class BpeModel : public Model {
 public:
  // `j` is the "model" value of tokenizer.json.
  static StatusOr<std::unique_ptr<BpeModel>> FromJson(const nlohmann::json& j);

  // Appends the ids of one pre-tokenized word (same as HF BPE::tokenize).
  Status Tokenize(std::string_view word, std::vector<int32_t>* ids) const override;

  // -1 when absent.
  int32_t TokenToId(std::string_view token) const override;
  // Null when the id has no token.
  const std::string* IdToToken(int32_t id) const override;
  // One past the largest id.
  int32_t id_limit() const override { return static_cast<int32_t>(id_to_token_.size()); }

  // The word cache's size now: words, and bytes as counted against kBpeCacheMaxBytes.
  size_t cache_words() const;
  size_t cache_bytes() const;

 private:
  struct MergeValue {
    int32_t rank;
    int32_t new_id;
  };
  // Open-addressing map (a_id, b_id) → merge; probes stay in one cache line for most lookups,
  // which matters because every BPE step of every word does one.
  class MergeMap {
   public:
    void Build(const std::vector<std::pair<uint64_t, MergeValue>>& entries);
    const MergeValue* Find(int32_t a, int32_t b) const;

   private:
    // The slot of `key`: splitmix64 of the key xor a per-process random seed. The multiplicative
    // hash before (bits 20.. of key·φ) let a tokenizer.json whose ids are multiples of 2^k put
    // every merge in one probe chain: loading 524,288 merges took 218 s instead of 5. A fixed
    // mixing function is as attackable offline; the seed (as Rust's HashMap, which HF uses) is not.
    uint64_t Slot(uint64_t key) const;
    std::vector<uint64_t> keys_;
    std::vector<MergeValue> values_;
    uint64_t mask_ = 0;
    uint64_t seed_ = 0;
  };

  BpeModel() = default;
  Status MergeWord(std::string_view word, std::vector<int32_t>* ids) const;
  int32_t CharId(std::string_view piece, bool first, bool last) const;

  StringMap<int32_t> vocab_;
  std::vector<std::string> id_to_token_;
  std::vector<uint8_t> id_present_;
  MergeMap merges_;
  std::vector<int32_t> bmp_char_id_;  // code point < 0x10000 → id, when no prefix/suffix applies
  int32_t byte_ids_[256];              // <0xNN> tokens for byte_fallback, -1 if absent
  std::string unk_token_;
  int32_t unk_id_ = -1;  // unk_token_'s id, -1 if it is not in the vocab
  bool has_unk_ = false;
  bool fuse_unk_ = false;
  bool byte_fallback_ = false;
  bool ignore_merges_ = false;
  std::string prefix_;  // continuing_subword_prefix
  std::string suffix_;  // end_of_word_suffix

  // Adds `word` → `ids` to the cache, evicting to make room. Under cache_mutex_.
  void CacheLocked(std::string_view word, std::vector<int32_t> ids) const;

  mutable std::mutex cache_mutex_;
  mutable StringMap<std::vector<int32_t>> cache_;
  mutable size_t cache_bytes_ = 0;   // of cache_'s words, as counted against kBpeCacheMaxBytes
  mutable size_t evict_bucket_ = 0;  // where the next eviction starts (a sweep over the buckets)
};

}  // namespace loom::tokenizer
