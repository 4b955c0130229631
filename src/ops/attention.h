// Causal GQA attention over a paged KV cache for a flat batch of rows from many sequences.
#pragma once

#include <cstdint>
#include <vector>

namespace loom {

constexpr int kKvBlockSize = 16;  // tokens per KV cache block

// One layer's cache: block b holds K as [num_kv_heads, head_dim, kKvBlockSize] (each head's keys
// transposed: the score kernels' 16 lanes are 16 positions) and V as [num_kv_heads,
// kKvBlockSize, head_dim], f32.
struct KvLayerView {
  float* k = nullptr;
  float* v = nullptr;
  int num_kv_heads = 0;
  int head_dim = 0;
  int64_t block_stride() const { return int64_t{num_kv_heads} * kKvBlockSize * head_dim; }
};

// Contiguous rows of one sequence in a step: rows first_row.. are positions start_pos..
struct AttentionChunk {
  int first_row = 0;
  int num_rows = 0;
  int start_pos = 0;
  const int32_t* block_table = nullptr;  // physical block of each 16-token logical block
  int num_blocks = 0;                    // covers start_pos + num_rows positions
};

// Stores k, v: [n, num_kv_heads, head_dim] of every chunk's rows at their positions.
void WriteKv(const KvLayerView& cache, const std::vector<AttentionChunk>& chunks, const float* k,
             const float* v);

// out[r, h, :] = softmax(scale · q[r, h]·K[0..p]ᵀ) · V[0..p] over the row's own sequence,
// positions p' with p − window < p' ≤ p when window > 0. q, out: [n, num_heads, head_dim].
// softcap > 0 (Gemma 2): each score s becomes tanh(s / softcap) · softcap before the softmax.
// Parallel over (row, head) on the global pool.
void Attention(const KvLayerView& cache, const std::vector<AttentionChunk>& chunks,
               const float* q, int num_heads, int window, float scale, float* out,
               float softcap = 0);

}  // namespace loom
