// BPE model: load from tokenizer.json and the merge loop of HF tokenizers (models/bpe).
#include "tokenizer/bpe_model.h"

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <queue>
#include <random>
#include <tuple>

#include "tokenizer/cancel.h"
#include "tokenizer/unicode.h"

namespace loom::tokenizer {

namespace {

using nlohmann::json;

constexpr size_t kCacheMaxWordBytes = 256;  // same limit as HF's BPE cache

// What one cached word counts against kBpeCacheMaxBytes.
size_t CacheEntryBytes(std::string_view word, const std::vector<int32_t>& ids) {
  return word.size() + ids.size() * sizeof(int32_t) + kBpeCacheEntryBytes;
}

uint64_t PairKey(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

}  // namespace

uint64_t BpeModel::MergeMap::Slot(uint64_t key) const {
  uint64_t z = key ^ seed_;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return (z ^ (z >> 31)) & mask_;
}

void BpeModel::MergeMap::Build(const std::vector<std::pair<uint64_t, MergeValue>>& entries) {
  try {
    std::random_device rd;
    seed_ = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  } catch (const std::exception&) {  // no entropy source: the address still varies per process
    seed_ = static_cast<uint64_t>(reinterpret_cast<uintptr_t>(this)) * 0x9E3779B97F4A7C15ull;
  }
  size_t capacity = 16;
  while (capacity < entries.size() * 2) capacity *= 2;
  keys_.assign(capacity, ~uint64_t{0});
  values_.assign(capacity, MergeValue{0, 0});
  mask_ = capacity - 1;
  for (const auto& [key, value] : entries) {
    uint64_t slot = Slot(key);
    while (keys_[slot] != ~uint64_t{0} && keys_[slot] != key) slot = (slot + 1) & mask_;
    keys_[slot] = key;
    values_[slot] = value;  // a later duplicate wins, as HF's HashMap collect does
  }
}

const BpeModel::MergeValue* BpeModel::MergeMap::Find(int32_t a, int32_t b) const {
  if (keys_.empty()) return nullptr;
  const uint64_t key = PairKey(a, b);
  uint64_t slot = Slot(key);
  while (true) {
    const uint64_t k = keys_[slot];
    if (k == key) return &values_[slot];
    if (k == ~uint64_t{0}) return nullptr;
    slot = (slot + 1) & mask_;
  }
}

StatusOr<std::unique_ptr<BpeModel>> BpeModel::FromJson(const json& j) {
  if (!j.is_object()) return InvalidArgument("model: expected an object");
  if (j.contains("type") && !j["type"].is_string()) {
    return InvalidArgument("model: \"type\" must be a string, got " + j["type"].dump());
  }
  const std::string type = j.value("type", std::string(j.contains("merges") ? "BPE" : ""));
  if (type != "BPE") {
    return InvalidArgument("model type '" + type +
                           "' is not supported by loom (supported: BPE, Unigram)");
  }
  if (j.contains("dropout") && j["dropout"].is_number() && j["dropout"].get<double>() != 0.0) {
    return InvalidArgument("model BPE: dropout " + j["dropout"].dump() +
                           " is not supported (encoding would not be deterministic)");
  }
  std::unique_ptr<BpeModel> m(new BpeModel());
  if (!j.contains("vocab") || !j["vocab"].is_object()) {
    return InvalidArgument("model BPE: missing object \"vocab\"");
  }
  int32_t max_id = -1;
  m->vocab_.reserve(j["vocab"].size());
  for (const auto& [token, id] : j["vocab"].items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > kMaxTokenId) {
      return InvalidArgument("model BPE: vocab entry '" + token + "' has an invalid id " +
                             id.dump() + " (ids are integers in [0, " +
                             std::to_string(kMaxTokenId) + "])");
    }
    const auto v = static_cast<int32_t>(id.get<int64_t>());
    m->vocab_[token] = v;
    max_id = std::max(max_id, v);
  }
  const int64_t max_sparse_id =
      kVocabIdSparsity * static_cast<int64_t>(m->vocab_.size()) + kVocabIdSlack;
  if (max_id > max_sparse_id) {
    return InvalidArgument("model BPE: vocab id " + std::to_string(max_id) + " is too large for " +
                           std::to_string(m->vocab_.size()) + " entries (at most " +
                           std::to_string(max_sparse_id) + ")");
  }
  m->id_to_token_.resize(static_cast<size_t>(max_id + 1));
  m->id_present_.assign(static_cast<size_t>(max_id + 1), 0);
  for (const auto& [token, id] : m->vocab_) {
    m->id_to_token_[id] = token;
    m->id_present_[id] = 1;
  }
  auto str_field = [&](const char* key) -> std::string {
    auto it = j.find(key);
    return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
  };
  auto bool_field = [&](const char* key) {
    auto it = j.find(key);
    return it != j.end() && it->is_boolean() && it->get<bool>();
  };
  m->has_unk_ = j.contains("unk_token") && j["unk_token"].is_string();
  m->unk_token_ = str_field("unk_token");
  m->fuse_unk_ = bool_field("fuse_unk");
  m->byte_fallback_ = bool_field("byte_fallback");
  m->ignore_merges_ = bool_field("ignore_merges");
  m->prefix_ = str_field("continuing_subword_prefix");
  m->suffix_ = str_field("end_of_word_suffix");
  // The affixes are copied for every character of a word, and with byte fallback each of their
  // bytes becomes a symbol per character: a long one would multiply every request's work and
  // memory by its length. Real ones are "##", "</w>". (The unk token is looked up once.)
  constexpr size_t kMaxAffixBytes = 16;
  for (const auto& [key, value, limit] :
       {std::tuple<const char*, const std::string*, size_t>{"unk_token", &m->unk_token_,
                                                            kMaxPieceBytes},
        {"continuing_subword_prefix", &m->prefix_, kMaxAffixBytes},
        {"end_of_word_suffix", &m->suffix_, kMaxAffixBytes}}) {
    if (value->size() > limit) {
      return InvalidArgument("model BPE: \"" + std::string(key) + "\" is " +
                             std::to_string(value->size()) + " bytes long (at most " +
                             std::to_string(limit) + ")");
    }
  }

  // Merges: "a b" strings (tokenizers < 0.20) or ["a", "b"] pairs.
  std::vector<std::pair<uint64_t, MergeValue>> merges;
  if (j.contains("merges") && !j["merges"].is_null()) {
    const json& list = j["merges"];
    if (!list.is_array()) {
      return InvalidArgument("model BPE: \"merges\" must be a list, got " +
                             std::string(list.type_name()));
    }
    merges.reserve(list.size());
    const size_t prefix_len = m->prefix_.size();
    for (size_t i = 0; i < list.size(); ++i) {
      const json& item = list[i];
      std::string a, b;
      if (item.is_string()) {
        const std::string line = item.get<std::string>();
        const size_t sp = line.find(' ');
        if (sp == std::string::npos || line.find(' ', sp + 1) != std::string::npos) {
          return InvalidArgument("model BPE: merges[" + std::to_string(i) + "] \"" + line +
                                 "\" is not two tokens separated by one space");
        }
        a = line.substr(0, sp);
        b = line.substr(sp + 1);
      } else if (item.is_array() && item.size() == 2 && item[0].is_string() &&
                 item[1].is_string()) {
        a = item[0].get<std::string>();
        b = item[1].get<std::string>();
      } else {
        return InvalidArgument("model BPE: merges[" + std::to_string(i) + "] must be \"a b\" or "
                               "[\"a\", \"b\"], got " + item.dump());
      }
      const int32_t a_id = m->TokenToId(a), b_id = m->TokenToId(b);
      if (a_id < 0 || b_id < 0) {
        return InvalidArgument("model BPE: merges[" + std::to_string(i) + "] token '" +
                               (a_id < 0 ? a : b) + "' is not in the vocab");
      }
      const std::string merged = a + (b.size() >= prefix_len ? b.substr(prefix_len) : "");
      const int32_t new_id = m->TokenToId(merged);
      if (new_id < 0) {
        return InvalidArgument("model BPE: merges[" + std::to_string(i) + "] result '" + merged +
                               "' is not in the vocab");
      }
      merges.push_back({PairKey(a_id, b_id), MergeValue{static_cast<int32_t>(i), new_id}});
    }
  }
  m->merges_.Build(merges);

  m->bmp_char_id_.assign(0x10000, -1);
  for (const auto& [token, id] : m->vocab_) {
    size_t pos = 0;
    const char32_t cp = NextCodePoint(token, &pos);
    if (pos == token.size() && cp < 0x10000) m->bmp_char_id_[cp] = id;
  }
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    m->byte_ids_[b] = m->TokenToId(name);
  }
  if (m->has_unk_) m->unk_id_ = m->TokenToId(m->unk_token_);
  return m;
}

int32_t BpeModel::TokenToId(std::string_view token) const {
  auto it = vocab_.find(token);
  return it == vocab_.end() ? -1 : it->second;
}

const std::string* BpeModel::IdToToken(int32_t id) const {
  if (id < 0 || id >= id_limit() || !id_present_[id]) return nullptr;
  return &id_to_token_[id];
}

int32_t BpeModel::CharId(std::string_view piece, bool first, bool last) const {
  const bool plain = (first || prefix_.empty()) && (!last || suffix_.empty());
  if (plain) {
    size_t pos = 0;
    const char32_t cp = NextCodePoint(piece, &pos);
    if (cp < 0x10000) return bmp_char_id_[cp];
    return TokenToId(piece);
  }
  std::string s;
  if (!first) s += prefix_;
  s += piece;
  if (last) s += suffix_;
  return TokenToId(s);
}

Status BpeModel::MergeWord(std::string_view word, std::vector<int32_t>* ids) const {
  struct Symbol {
    int32_t id;
    int32_t prev;
    int32_t next;
    bool removed;
  };
  std::vector<Symbol> symbols;
  symbols.reserve(word.size());
  auto add = [&](int32_t id) {
    const auto n = static_cast<int32_t>(symbols.size());
    symbols.push_back({id, n - 1, n + 1, false});
  };
  int32_t pending_unk = -1;  // same as HF: an unknown run waits to be fused or flushed
  size_t pos = 0;
  while (pos < word.size()) {
    if (EncodeCancelled()) return EncodeCancelledError("a BPE word");
    // Symbols are indexed by int32 (and byte fallback adds up to 4 + 2 * 256 per character).
    if (symbols.size() > static_cast<size_t>(INT32_MAX) - 1024) {
      return InvalidArgument("model BPE: a word of " + std::to_string(word.size()) +
                             " bytes is too long to encode");
    }
    const size_t start = pos;
    pos += Utf8Length(static_cast<uint8_t>(word[pos]));
    pos = std::min(pos, word.size());
    const std::string_view piece = word.substr(start, pos - start);
    const int32_t id = CharId(piece, start == 0, pos == word.size());
    if (id >= 0) {
      if (pending_unk >= 0) {
        add(pending_unk);
        pending_unk = -1;
      }
      add(id);
      continue;
    }
    if (byte_fallback_) {
      std::string s;
      if (start != 0) s += prefix_;
      s += piece;
      if (pos == word.size()) s += suffix_;
      bool all = true;
      for (unsigned char b : s) all &= byte_ids_[b] >= 0;
      if (all) {
        // HF pushes the byte tokens without flushing a pending unk first.
        for (unsigned char b : s) add(byte_ids_[b]);
        continue;
      }
    }
    if (has_unk_) {
      const int32_t unk_id = unk_id_;
      if (unk_id < 0) {
        return InvalidArgument("model BPE: unk_token '" + unk_token_ + "' is not in the vocab");
      }
      if (pending_unk >= 0 && !fuse_unk_) add(pending_unk);
      pending_unk = unk_id;
    }
  }
  if (pending_unk >= 0) add(pending_unk);
  if (!symbols.empty()) symbols.back().next = -1;

  struct Merge {
    int32_t rank;
    int32_t pos;
    int32_t new_id;
    bool operator<(const Merge& o) const {  // priority_queue pops the largest: lowest rank, pos
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  std::vector<Merge> storage;
  storage.reserve(symbols.size());
  std::priority_queue<Merge> queue(std::less<Merge>(), std::move(storage));
  for (size_t i = 0; i + 1 < symbols.size(); ++i) {
    if (EncodeCancelled()) return EncodeCancelledError("a BPE word");
    if (const MergeValue* mv = merges_.Find(symbols[i].id, symbols[i + 1].id)) {
      queue.push({mv->rank, static_cast<int32_t>(i), mv->new_id});
    }
  }
  while (!queue.empty()) {
    if (EncodeCancelled()) return EncodeCancelledError("a BPE word");
    const Merge top = queue.top();
    queue.pop();
    Symbol& cur = symbols[top.pos];
    if (cur.removed || cur.next < 0) continue;
    const int32_t next_pos = cur.next;
    const Symbol right = symbols[next_pos];
    const MergeValue* check = merges_.Find(cur.id, right.id);
    if (check == nullptr || check->new_id != top.new_id) continue;  // stale entry
    cur.id = top.new_id;
    cur.next = right.next;
    symbols[next_pos].removed = true;
    if (right.next >= 0) symbols[right.next].prev = top.pos;
    if (cur.prev >= 0) {
      if (const MergeValue* mv = merges_.Find(symbols[cur.prev].id, cur.id)) {
        queue.push({mv->rank, cur.prev, mv->new_id});
      }
    }
    if (cur.next >= 0) {
      if (const MergeValue* mv = merges_.Find(cur.id, symbols[cur.next].id)) {
        queue.push({mv->rank, top.pos, mv->new_id});
      }
    }
  }
  for (const Symbol& s : symbols) {
    if (!s.removed) ids->push_back(s.id);
  }
  return OkStatus();
}

Status BpeModel::Tokenize(std::string_view word, std::vector<int32_t>* ids) const {
  if (word.empty()) return OkStatus();
  if (ignore_merges_) {
    const int32_t id = TokenToId(word);
    if (id >= 0) {
      ids->push_back(id);
      return OkStatus();
    }
  }
  const bool cacheable = word.size() < kCacheMaxWordBytes;
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    auto it = cache_.find(word);
    if (it != cache_.end()) {
      ids->insert(ids->end(), it->second.begin(), it->second.end());
      return OkStatus();
    }
  }
  const size_t first = ids->size();
  RETURN_IF_ERROR(MergeWord(word, ids));
  if (cacheable) {
    std::vector<int32_t> merged(ids->begin() + first, ids->end());
    std::lock_guard<std::mutex> lock(cache_mutex_);
    CacheLocked(word, std::move(merged));
  }
  return OkStatus();
}

void BpeModel::CacheLocked(std::string_view word, std::vector<int32_t> ids) const {
  if (cache_.find(word) != cache_.end()) return;  // another thread merged it meanwhile
  const size_t bytes = CacheEntryBytes(word, ids);
  // Evicts a few words at a time rather than everything (a full cache was cleared, and every
  // common word merged again), sweeping the buckets in order from where the last eviction
  // stopped: words of every age go in turn, so the cache follows a change of text. The hash
  // spreads the words over the buckets, so the sweep takes no word preferentially.
  while (!cache_.empty() &&
         (cache_.size() >= kBpeCacheMaxWords || cache_bytes_ + bytes > kBpeCacheMaxBytes)) {
    const size_t bucket = evict_bucket_++ % cache_.bucket_count();
    while (cache_.bucket_size(bucket) > 0) {
      auto it = cache_.find(std::string_view(cache_.begin(bucket)->first));
      cache_bytes_ -= CacheEntryBytes(it->first, it->second);
      cache_.erase(it);
    }
  }
  cache_.emplace(std::string(word), std::move(ids));
  cache_bytes_ += bytes;
}

size_t BpeModel::cache_words() const {
  std::lock_guard<std::mutex> lock(cache_mutex_);
  return cache_.size();
}

size_t BpeModel::cache_bytes() const {
  std::lock_guard<std::mutex> lock(cache_mutex_);
  return cache_bytes_;
}

}  // namespace loom::tokenizer
