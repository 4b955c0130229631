// CPU kernels for one query row of paged attention, one function per ISA level.
#pragma once

#include <cstdint>

#include "cpu/cpu_features.h"

namespace loom::cpu {

// One KV head of one sequence in a paged cache of elements T: float, or uint16_t holding bf16
// bits (--kv-cache-dtype bfloat16; widened exactly to f32 before any arithmetic, so a bf16 cache
// computes what an f32 cache holding the same rounded values would). Block b = block_table[p / 16]
// holds, from b * block_stride + head_offset, the head's K transposed, [head_dim, 16] (element
// (p, d) at KeyIndex<T>(p % 16, d): a key block's 16 scores are 16-lane FMAs with no horizontal
// sums), and V as [16, head_dim] (position p's row at (p % 16) * head_dim): the same offsets in k
// and v.
template <typename T>
struct PagedKvHeadT {
  const T* k;
  const T* v;
  int64_t block_stride;
  int64_t head_offset;
  const int32_t* block_table;
};
using PagedKvHead = PagedKvHeadT<float>;
using PagedKvHeadBf16 = PagedKvHeadT<uint16_t>;

// Where K element (slot = p % 16, dimension d) sits in its block's head: f32 as [head_dim, 16]
// (d · 16 + slot); bf16 as [head_dim / 2, 16, 2], dimension pairs interleaved, so one 64-byte load
// holds dimensions d and d + 1 of 16 positions and widens to two 16-lane f32 vectors with one
// shift and one mask (head_dim even: KvCache refuses a bf16 cache otherwise).
template <typename T>
constexpr int64_t KeyIndex(int slot, int d) {
  if constexpr (sizeof(T) == 2) {
    return int64_t{d >> 1} * 32 + slot * 2 + (d & 1);
  } else {
    return int64_t{d} * 16 + slot;
  }
}

// The transposed K of the block that holds position p (its elements at KeyIndex).
template <typename T>
inline const T* KeyBlock(const PagedKvHeadT<T>& kv, int p) {
  return kv.k + kv.block_table[p / 16] * kv.block_stride + kv.head_offset;
}

// Position p's row of head_dim elements of V.
template <typename T>
inline const T* ValueRow(const PagedKvHeadT<T>& kv, int p, int head_dim) {
  return kv.v + kv.block_table[p / 16] * kv.block_stride + kv.head_offset + (p % 16) * head_dim;
}

// out[hd] = Σ_p softmax(scale · q·K[p])_p · V[p] over positions first..last (inclusive).
// softcap > 0: each score s = scale · q·K[p] becomes tanh(s / softcap) · softcap first.
// scores: scratch of at least last + 1 floats.
void AttendRow(Isa isa, const float* q, int head_dim, const PagedKvHead& kv, int first, int last,
               float scale, float softcap, float* scores, float* out);
void AttendRowScalar(const float* q, int head_dim, const PagedKvHead& kv, int first, int last,
                     float scale, float softcap, float* scores, float* out);
void AttendRowAvx2(const float* q, int head_dim, const PagedKvHead& kv, int first, int last,
                   float scale, float softcap, float* scores, float* out);
void AttendRowAvx512(const float* q, int head_dim, const PagedKvHead& kv, int first, int last,
                     float scale, float softcap, float* scores, float* out);

// AttendRow for `heads` query heads that share one KV head: head h reads q + h·q_stride, writes
// out + h·out_stride and uses scores + h·scores_stride (≥ last + 1 floats each). Each head's
// result is bitwise AttendRow's; the AVX-512 kernel loads each V row once for up to 4 heads, the
// avx2 kernel each K and V vector once for up to 4.
void AttendHeads(Isa isa, int heads, const float* q, int64_t q_stride, int head_dim,
                 const PagedKvHead& kv, int first, int last, float scale, float softcap,
                 float* scores, int64_t scores_stride, float* out, int64_t out_stride);
void AttendHeadsAvx512(int heads, const float* q, int64_t q_stride, int head_dim,
                       const PagedKvHead& kv, int first, int last, float scale, float softcap,
                       float* scores, int64_t scores_stride, float* out, int64_t out_stride);
void AttendHeadsAvx2(int heads, const float* q, int64_t q_stride, int head_dim,
                     const PagedKvHead& kv, int first, int last, float scale, float softcap,
                     float* scores, int64_t scores_stride, float* out, int64_t out_stride);

// The same kernels over a bf16 cache.
void AttendRow(Isa isa, const float* q, int head_dim, const PagedKvHeadBf16& kv, int first,
               int last, float scale, float softcap, float* scores, float* out);
void AttendRowScalar(const float* q, int head_dim, const PagedKvHeadBf16& kv, int first, int last,
                     float scale, float softcap, float* scores, float* out);
void AttendRowAvx2(const float* q, int head_dim, const PagedKvHeadBf16& kv, int first, int last,
                   float scale, float softcap, float* scores, float* out);
void AttendRowAvx512(const float* q, int head_dim, const PagedKvHeadBf16& kv, int first, int last,
                     float scale, float softcap, float* scores, float* out);
void AttendHeads(Isa isa, int heads, const float* q, int64_t q_stride, int head_dim,
                 const PagedKvHeadBf16& kv, int first, int last, float scale, float softcap,
                 float* scores, int64_t scores_stride, float* out, int64_t out_stride);
void AttendHeadsAvx512(int heads, const float* q, int64_t q_stride, int head_dim,
                       const PagedKvHeadBf16& kv, int first, int last, float scale, float softcap,
                       float* scores, int64_t scores_stride, float* out, int64_t out_stride);
void AttendHeadsAvx2(int heads, const float* q, int64_t q_stride, int head_dim,
                     const PagedKvHeadBf16& kv, int first, int last, float scale, float softcap,
                     float* scores, int64_t scores_stride, float* out, int64_t out_stride);

}  // namespace loom::cpu
