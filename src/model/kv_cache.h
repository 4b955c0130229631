// Paged KV cache: fixed pool of 16-token blocks per layer, the free list, and the prefix cache index.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "ops/attention.h"
#include "tensor/tensor.h"

namespace loom {

// Thread-safety: owned and used by the engine thread only.
class KvCache {
 public:
  // A pool of `num_blocks` 16-token blocks of `dtype` elements. kResourceExhausted (and nothing
  // allocated) when the size overflows or the memory cannot be had; kInvalidArgument for a
  // negative dimension, or a bf16 cache of an odd head_dim (cpu::KeyIndex pairs dimensions).
  static StatusOr<std::unique_ptr<KvCache>> Create(int num_layers, int num_kv_heads, int head_dim,
                                                   int num_blocks, KvDtype dtype = KvDtype::kF32);
  // Bytes of K and V for `num_tokens` positions (rounded up to whole blocks); nullopt when the
  // product overflows 64 bits.
  static std::optional<uint64_t> BytesFor(int num_layers, int num_kv_heads, int head_dim,
                                          int64_t num_tokens, KvDtype dtype = KvDtype::kF32);

  KvLayerView Layer(int layer);
  int num_blocks() const { return num_blocks_; }
  // Blocks no sequence holds (some may still index cached prefixes: they are reused last).
  int num_free_blocks() const { return num_free_; }
  size_t bytes() const { return k_.size() * 2; }
  KvDtype dtype() const { return dtype_; }

  // Appends blocks to `table` until it covers `num_tokens` positions; false (and no change)
  // when the pool cannot supply them.
  bool Reserve(std::vector<int32_t>* table, int num_tokens);
  // Drops this table's hold on its blocks and clears it. A block nobody holds goes back to the
  // pool; if it indexes a prefix it stays findable until the pool hands it out again
  // (least recently released first).
  void Release(std::vector<int32_t>* table);

  // Prefix cache. A full block's key is a keyed hash (SipHash, the process's secret key) of
  // (adapter identity, previous block's key, its 16 tokens), so a hit means the same adapter
  // saw the same tokens at the same positions; clients cannot compute colliding keys, and a hit
  // is taken only when the block's stored tokens equal the asked ones as well. What the key
  // stands for beyond those 16 tokens (the adapter, the earlier blocks, longrope's factor set)
  // rests on the 63-bit keyed hash alone: a wrong hit needs a chance collision, ~2⁻⁶³ a lookup.
  // Appends to `table` the cached blocks of the longest prefix of `keys` found; returns how
  // many. `tokens` holds 16 tokens per key (block i: tokens[16 i, 16 i + 16)). The blocks are
  // shared (reference counted) and never written again.
  int MatchPrefix(const std::vector<uint64_t>& keys, const int32_t* tokens,
                  std::vector<int32_t>* table);
  // Indexes a full block under `key` with its 16 tokens (no-op when the key is already
  // indexed).
  void Publish(int32_t block, uint64_t key, const int32_t* tokens);
  int num_cached_blocks() const { return static_cast<int>(cached_.size()); }

  static int BlocksFor(int num_tokens) { return (num_tokens + kKvBlockSize - 1) / kKvBlockSize; }

 private:
  KvCache(int num_layers, int num_kv_heads, int head_dim, int num_blocks, KvDtype dtype);

  int num_layers_;
  int num_kv_heads_;
  int head_dim_;
  int num_blocks_;
  KvDtype dtype_;
  int64_t layer_bytes_;
  // [num_layers, num_blocks, num_kv_heads, head_dim, 16] (transposed; bf16: [..., head_dim / 2,
  // 16, 2], cpu::KeyIndex)
  AlignedBuffer<uint8_t> k_;
  AlignedBuffer<uint8_t> v_;  // [num_layers, num_blocks, num_kv_heads, 16, head_dim]
  // Free blocks, least recently released first. An entry is stale when the block was taken
  // back by MatchPrefix since (its stamp no longer matches).
  std::deque<std::pair<int32_t, uint32_t>> free_;
  int num_free_ = 0;
  std::vector<int32_t> refs_;          // [num_blocks] tables holding the block
  std::vector<uint32_t> stamps_;       // [num_blocks] bumps when the block leaves the free list
  std::vector<uint64_t> keys_;         // [num_blocks] prefix key, 0 = none
  std::vector<int32_t> block_tokens_;  // [num_blocks, 16] the tokens of an indexed block
  std::unordered_map<uint64_t, int32_t> cached_;  // prefix key → block
  int32_t TakeFree();
};

}  // namespace loom
