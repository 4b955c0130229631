// CPU kernels for one query row of paged attention, one function per ISA level.
#pragma once

#include <cstdint>

#include "cpu/cpu_features.h"

namespace loom::cpu {

// One KV head of one sequence in a paged cache: position p lives at
// k + block_table[p / 16] * block_stride + head_offset + (p % 16) * head_dim (same for v).
struct PagedKvHead {
  const float* k;
  const float* v;
  int64_t block_stride;
  int64_t head_offset;
  const int32_t* block_table;
};

// Position p's row of head_dim floats in `base` (kv.k or kv.v).
inline const float* KvRow(const float* base, const PagedKvHead& kv, int p, int head_dim) {
  return base + kv.block_table[p / 16] * kv.block_stride + kv.head_offset + (p % 16) * head_dim;
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
// result is bitwise AttendRow's; the AVX-512 kernel loads each V row once for up to 4 heads.
void AttendHeads(Isa isa, int heads, const float* q, int64_t q_stride, int head_dim,
                 const PagedKvHead& kv, int first, int last, float scale, float softcap,
                 float* scores, int64_t scores_stride, float* out, int64_t out_stride);
void AttendHeadsAvx512(int heads, const float* q, int64_t q_stride, int head_dim,
                       const PagedKvHead& kv, int first, int last, float scale, float softcap,
                       float* scores, int64_t scores_stride, float* out, int64_t out_stride);

}  // namespace loom::cpu
