// Paged KV cache: fixed pool of 16-token blocks per layer, and the free list that hands them out.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "base/status.h"
#include "ops/attention.h"
#include "tensor/tensor.h"

namespace loom {

// Thread-safety: owned and used by the engine thread only.
class KvCache {
 public:
  // A pool of `num_blocks` 16-token blocks. kResourceExhausted (and nothing allocated) when the
  // size overflows or the memory cannot be had; kInvalidArgument for a negative dimension.
  static StatusOr<std::unique_ptr<KvCache>> Create(int num_layers, int num_kv_heads, int head_dim,
                                                   int num_blocks);
  // Bytes of K and V for `num_tokens` positions (rounded up to whole blocks); nullopt when the
  // product overflows 64 bits.
  static std::optional<uint64_t> BytesFor(int num_layers, int num_kv_heads, int head_dim,
                                          int64_t num_tokens);

  KvLayerView Layer(int layer);
  int num_blocks() const { return num_blocks_; }
  int num_free_blocks() const { return static_cast<int>(free_.size()); }
  size_t bytes() const { return k_.size() * sizeof(float) * 2; }

  // Appends blocks to `table` until it covers `num_tokens` positions; false (and no change)
  // when the pool cannot supply them.
  bool Reserve(std::vector<int32_t>* table, int num_tokens);
  // Returns every block of `table` to the pool and clears it.
  void Release(std::vector<int32_t>* table);

  static int BlocksFor(int num_tokens) { return (num_tokens + kKvBlockSize - 1) / kKvBlockSize; }

 private:
  KvCache(int num_layers, int num_kv_heads, int head_dim, int num_blocks);

  int num_layers_;
  int num_kv_heads_;
  int head_dim_;
  int num_blocks_;
  int64_t layer_floats_;
  AlignedBuffer<float> k_;  // [num_layers, num_blocks, num_kv_heads, 16, head_dim]
  AlignedBuffer<float> v_;  // same
  std::vector<int32_t> free_;
};

}  // namespace loom
