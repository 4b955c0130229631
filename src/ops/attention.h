// Causal GQA attention over a paged KV cache for a flat batch of rows from many sequences.
#pragma once

#include <cstdint>
#include <vector>

namespace loom {

constexpr int kKvBlockSize = 16;  // tokens per KV cache block

// Element type of the KV cache: f32, or bf16 (each K and V element rounded to nearest even when
// written, widened exactly when read; vLLM's default for a bf16 model, half the bytes).
enum class KvDtype : uint8_t { kF32, kBf16 };
const char* KvDtypeName(KvDtype dtype);  // vLLM's spelling: "float32", "bfloat16"
inline int64_t KvDtypeSize(KvDtype dtype) { return dtype == KvDtype::kBf16 ? 2 : 4; }

// One layer's cache: block b holds K as [num_kv_heads, head_dim, kKvBlockSize] (each head's keys
// transposed: the score kernels' 16 lanes are 16 positions; bf16 as dimension pairs,
// [num_kv_heads, head_dim / 2, kKvBlockSize, 2]: cpu::KeyIndex) and V as [num_kv_heads,
// kKvBlockSize, head_dim], elements of `dtype` (float, or uint16_t bf16 bits).
struct KvLayerView {
  void* k = nullptr;
  void* v = nullptr;
  int num_kv_heads = 0;
  int head_dim = 0;
  KvDtype dtype = KvDtype::kF32;
  int64_t block_stride() const {
    return int64_t{num_kv_heads} * kKvBlockSize * head_dim;
  }  // elements
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
