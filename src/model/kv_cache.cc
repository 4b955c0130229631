// KvCache storage and block free list.
#include "model/kv_cache.h"

namespace loom {

KvCache::KvCache(int num_layers, int num_kv_heads, int head_dim, int num_blocks)
    : num_layers_(num_layers),
      num_kv_heads_(num_kv_heads),
      head_dim_(head_dim),
      num_blocks_(num_blocks) {
  layer_floats_ = int64_t{num_blocks} * num_kv_heads * kKvBlockSize * head_dim;
  k_.Resize(static_cast<size_t>(layer_floats_ * num_layers));
  v_.Resize(static_cast<size_t>(layer_floats_ * num_layers));
  free_.reserve(static_cast<size_t>(num_blocks));
  for (int b = num_blocks - 1; b >= 0; --b) free_.push_back(b);
}

KvLayerView KvCache::Layer(int layer) {
  KvLayerView view;
  view.k = k_.data() + layer * layer_floats_;
  view.v = v_.data() + layer * layer_floats_;
  view.num_kv_heads = num_kv_heads_;
  view.head_dim = head_dim_;
  return view;
}

bool KvCache::Reserve(std::vector<int32_t>* table, int num_tokens) {
  const int need = BlocksFor(num_tokens) - static_cast<int>(table->size());
  if (need <= 0) return true;
  if (need > num_free_blocks()) return false;
  for (int i = 0; i < need; ++i) {
    table->push_back(free_.back());
    free_.pop_back();
  }
  return true;
}

void KvCache::Release(std::vector<int32_t>* table) {
  for (int32_t b : *table) free_.push_back(b);
  table->clear();
}

}  // namespace loom
