// KvCache storage, block free list with reference counts, and the prefix-cache index.
#include "model/kv_cache.h"

#include <cstring>

namespace loom {

KvCache::KvCache(int num_layers, int num_kv_heads, int head_dim, int num_blocks, KvDtype dtype)
    : num_layers_(num_layers),
      num_kv_heads_(num_kv_heads),
      head_dim_(head_dim),
      num_blocks_(num_blocks),
      dtype_(dtype) {
  layer_bytes_ = int64_t{num_blocks} * num_kv_heads * kKvBlockSize * head_dim * KvDtypeSize(dtype);
}

std::optional<uint64_t> KvCache::BytesFor(int num_layers, int num_kv_heads, int head_dim,
                                          int64_t num_tokens, KvDtype dtype) {
  if (num_layers < 0 || num_kv_heads < 0 || head_dim < 0 || num_tokens < 0) return std::nullopt;
  const uint64_t blocks = (static_cast<uint64_t>(num_tokens) + kKvBlockSize - 1) / kKvBlockSize;
  uint64_t n = blocks * kKvBlockSize;  // < 2^60: num_tokens < 2^63
  for (uint64_t f : {uint64_t(num_layers), uint64_t(num_kv_heads), uint64_t(head_dim),
                     uint64_t(2 * KvDtypeSize(dtype))}) {
    if (f != 0 && n > UINT64_MAX / f) return std::nullopt;
    n *= f;
  }
  return n;
}

StatusOr<std::unique_ptr<KvCache>> KvCache::Create(int num_layers, int num_kv_heads, int head_dim,
                                                   int num_blocks, KvDtype dtype) {
  if (num_layers < 0 || num_kv_heads < 0 || head_dim < 0 || num_blocks < 0) {
    return InvalidArgument("KV cache: negative size (layers " + std::to_string(num_layers) +
                           ", kv heads " + std::to_string(num_kv_heads) + ", head_dim " +
                           std::to_string(head_dim) + ", blocks " + std::to_string(num_blocks) +
                           ")");
  }
  if (dtype == KvDtype::kBf16 && head_dim % 2 != 0) {  // K's bf16 layout pairs dimensions
    return InvalidArgument("KV cache: a bfloat16 cache needs an even head_dim, this model's is " +
                           std::to_string(head_dim) + " (--kv-cache-dtype float32)");
  }
  const auto bytes =
      BytesFor(num_layers, num_kv_heads, head_dim, int64_t{num_blocks} * kKvBlockSize, dtype);
  if (!bytes || *bytes / 2 > static_cast<uint64_t>(INT64_MAX)) {
    return ResourceExhausted("KV cache: " + std::to_string(num_blocks) +
                             " blocks overflow the addressable size");
  }
  std::unique_ptr<KvCache> cache(
      new KvCache(num_layers, num_kv_heads, head_dim, num_blocks, dtype));
  const size_t half = static_cast<size_t>(*bytes / 2);  // K's bytes, V's bytes
  Status st = cache->k_.Resize(half);
  if (st.ok()) st = cache->v_.Resize(half);
  if (!st.ok()) {
    return ResourceExhausted("KV cache of " + std::to_string(int64_t{num_blocks} * kKvBlockSize) +
                             " tokens: " + st.message());
  }
  cache->refs_.assign(static_cast<size_t>(num_blocks), 0);
  cache->stamps_.assign(static_cast<size_t>(num_blocks), 0);
  cache->keys_.assign(static_cast<size_t>(num_blocks), 0);
  cache->block_tokens_.assign(static_cast<size_t>(num_blocks) * kKvBlockSize, 0);
  for (int b = 0; b < num_blocks; ++b) cache->free_.emplace_back(b, 0);
  cache->num_free_ = num_blocks;
  return cache;
}

int32_t KvCache::TakeFree() {
  while (true) {
    auto [b, stamp] = free_.front();
    free_.pop_front();
    const size_t i = static_cast<size_t>(b);
    if (stamps_[i] != stamp || refs_[i] != 0) continue;  // stale entry
    ++stamps_[i];
    if (keys_[i] != 0) {  // evict its prefix entry: the block is about to be overwritten
      auto it = cached_.find(keys_[i]);
      if (it != cached_.end() && it->second == b) cached_.erase(it);
      keys_[i] = 0;
    }
    refs_[i] = 1;
    --num_free_;
    return b;
  }
}

KvLayerView KvCache::Layer(int layer) {
  KvLayerView view;
  view.k = k_.data() + layer * layer_bytes_;
  view.v = v_.data() + layer * layer_bytes_;
  view.num_kv_heads = num_kv_heads_;
  view.head_dim = head_dim_;
  view.dtype = dtype_;
  return view;
}

bool KvCache::Reserve(std::vector<int32_t>* table, int num_tokens) {
  const int need = BlocksFor(num_tokens) - static_cast<int>(table->size());
  if (need <= 0) return true;
  if (need > num_free_blocks()) return false;
  for (int i = 0; i < need; ++i) table->push_back(TakeFree());
  return true;
}

void KvCache::Release(std::vector<int32_t>* table) {
  for (int32_t b : *table) {
    const size_t i = static_cast<size_t>(b);
    if (--refs_[i] == 0) {
      free_.emplace_back(b, stamps_[i]);
      ++num_free_;
    }
  }
  table->clear();
  // Stale entries accumulate when cached blocks are re-taken; compact now and then.
  if (free_.size() > 4 * static_cast<size_t>(num_blocks_) + 64) {
    std::deque<std::pair<int32_t, uint32_t>> live;
    for (const auto& e : free_) {
      if (stamps_[static_cast<size_t>(e.first)] == e.second && refs_[static_cast<size_t>(e.first)] == 0) {
        live.push_back(e);
      }
    }
    free_.swap(live);
  }
}

int KvCache::MatchPrefix(const std::vector<uint64_t>& keys, const int32_t* tokens,
                         std::vector<int32_t>* table) {
  int matched = 0;
  for (uint64_t key : keys) {
    auto it = cached_.find(key);
    if (it == cached_.end()) break;
    const int32_t b = it->second;
    const size_t i = static_cast<size_t>(b);
    // A key that collides with another block's (found by chance or made) is a miss.
    if (std::memcmp(&block_tokens_[i * kKvBlockSize], tokens + size_t(matched) * kKvBlockSize,
                    sizeof(int32_t) * kKvBlockSize) != 0) {
      break;
    }
    if (refs_[i]++ == 0) {  // leaves the free list (its entry there goes stale)
      ++stamps_[i];
      --num_free_;
    }
    table->push_back(b);
    ++matched;
  }
  return matched;
}

void KvCache::Publish(int32_t block, uint64_t key, const int32_t* tokens) {
  if (key == 0 || cached_.count(key) != 0) return;
  const size_t i = static_cast<size_t>(block);
  if (keys_[i] != 0) return;
  keys_[i] = key;
  std::memcpy(&block_tokens_[i * kKvBlockSize], tokens, sizeof(int32_t) * kKvBlockSize);
  cached_.emplace(key, block);
}

}  // namespace loom
