// Attention row kernels: scalar reference and AVX-512 (16-lane dot products and V accumulation).
// GCC 12 warns falsely inside its own AVX-512 headers (_mm512_undefined_* in reductions).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include "cpu/attention_cpu.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>

#define LOOM_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma")))

namespace loom::cpu {

namespace {
inline const float* At(const float* base, const PagedKvHead& kv, int p, int hd) {
  return base + kv.block_table[p / 16] * kv.block_stride + kv.head_offset + (p % 16) * hd;
}

// transformers' order: divide, tanh, multiply (Gemma 2 attn_logit_softcapping).
inline float SoftCap(float s, float cap) { return cap > 0 ? std::tanh(s / cap) * cap : s; }
}  // namespace

void AttendRowScalar(const float* q, int hd, const PagedKvHead& kv, int first, int last,
                     float scale, float softcap, float* scores, float* out) {
  float mx = -INFINITY;
  for (int p = first; p <= last; ++p) {
    const float* k = At(kv.k, kv, p, hd);
    float dot = 0;
    for (int d = 0; d < hd; ++d) dot += q[d] * k[d];
    scores[p] = SoftCap(dot * scale, softcap);
    mx = std::max(mx, scores[p]);
  }
  float sum = 0;
  for (int p = first; p <= last; ++p) sum += scores[p] = std::exp(scores[p] - mx);
  const float inv = 1.0f / sum;
  for (int d = 0; d < hd; ++d) out[d] = 0;
  for (int p = first; p <= last; ++p) {
    const float* v = At(kv.v, kv, p, hd);
    const float w = scores[p] * inv;
    for (int d = 0; d < hd; ++d) out[d] += w * v[d];
  }
}

LOOM_AVX512 void AttendRowAvx512(const float* q, int hd, const PagedKvHead& kv, int first,
                                 int last, float scale, float softcap, float* scores,
                                 float* out) {
  const int full = hd & ~15;
  const __mmask16 tail = static_cast<__mmask16>((1u << (hd - full)) - 1);
  float mx = -INFINITY;
  for (int p = first; p <= last; ++p) {
    const float* k = At(kv.k, kv, p, hd);
    __m512 acc = _mm512_setzero_ps();
    for (int d = 0; d < full; d += 16) {
      acc = _mm512_fmadd_ps(_mm512_loadu_ps(q + d), _mm512_loadu_ps(k + d), acc);
    }
    if (tail) {
      acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(tail, q + full), _mm512_maskz_loadu_ps(tail, k + full), acc);
    }
    scores[p] = SoftCap(_mm512_reduce_add_ps(acc) * scale, softcap);
    mx = std::max(mx, scores[p]);
  }
  float sum = 0;
  for (int p = first; p <= last; ++p) sum += scores[p] = std::exp(scores[p] - mx);
  const float inv = 1.0f / sum;
  for (int d = 0; d < hd; d += 16) {
    const __mmask16 m = d + 16 <= hd ? static_cast<__mmask16>(0xffff) : tail;
    __m512 o = _mm512_setzero_ps();
    for (int p = first; p <= last; ++p) {
      const float* v = At(kv.v, kv, p, hd);
      o = _mm512_fmadd_ps(_mm512_set1_ps(scores[p] * inv), _mm512_maskz_loadu_ps(m, v + d), o);
    }
    _mm512_mask_storeu_ps(out + d, m, o);
  }
}

void AttendRow(Isa isa, const float* q, int hd, const PagedKvHead& kv, int first, int last,
               float scale, float softcap, float* scores, float* out) {
  switch (isa) {
    case Isa::kAmx:
    case Isa::kAvx512Bf16:
    case Isa::kAvx512: return AttendRowAvx512(q, hd, kv, first, last, scale, softcap, scores, out);
    case Isa::kAvx2:
    case Isa::kScalar: return AttendRowScalar(q, hd, kv, first, last, scale, softcap, scores, out);
  }
}

}  // namespace loom::cpu
