// Attention row kernels: scalar reference and AVX-512 (16-lane dot products and V accumulation); AVX2 in attention_avx2_cpu.cc.
// GCC 12 warns falsely inside its own AVX-512 headers (_mm512_undefined_* in reductions).
#pragma GCC diagnostic ignored "-Wuninitialized"
#if !defined(__clang__)  // a gcc-only warning
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include "cpu/attention_cpu.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "cpu/exp_poly.h"

#define LOOM_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma")))

namespace loom::cpu {

namespace {
// transformers' order: divide, tanh, multiply (Gemma 2 attn_logit_softcapping).
inline float SoftCap(float s, float cap) { return cap > 0 ? std::tanh(s / cap) * cap : s; }
}  // namespace

void AttendRowScalar(const float* q, int hd, const PagedKvHead& kv, int first, int last,
                     float scale, float softcap, float* scores, float* out) {
  float mx = -INFINITY;
  for (int p = first; p <= last; ++p) {
    const float* k = KvRow(kv.k, kv, p, hd);
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
    const float* v = KvRow(kv.v, kv, p, hd);
    const float w = scores[p] * inv;
    for (int d = 0; d < hd; ++d) out[d] += w * v[d];
  }
}

namespace {
// exp(x) for x ≤ 0 (softmax after subtracting the max), 16 lanes: Cephes' expf polynomial
// (≤ 2 ulp), x = n·ln2 + r, 2ⁿ applied with vscalefps. Lanes below −87.3 give 0.
LOOM_AVX512 inline __m512 ExpNonPositive(__m512 x) {
  namespace e = exp_poly;
  const __m512 lo = _mm512_set1_ps(e::kMinInput);
  const __mmask16 under = _mm512_cmp_ps_mask(x, lo, _CMP_LT_OQ);
  x = _mm512_max_ps(x, lo);
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(e::kLog2e)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(e::kLn2Hi), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(e::kLn2Lo), r);
  __m512 p = _mm512_set1_ps(e::kP[0]);
  for (int i = 1; i < 6; ++i) p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(e::kP[i]));
  p = _mm512_fmadd_ps(_mm512_mul_ps(p, r), r, _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  return _mm512_maskz_mov_ps(static_cast<__mmask16>(~under), _mm512_scalef_ps(p, n));
}

// The 16 horizontal sums of v[0..15] as one vector (lane j = Σ v[j]), by three rounds of
// 128-bit and in-lane shuffles: ~30 shuffles and 15 adds instead of 16 reductions. The order of
// each sum depends only on j.
LOOM_AVX512 inline __m512 HorizontalSums16(const __m512* v) {
  __m512 w[8], u[4], r[2];
  for (int i = 0; i < 8; ++i) {  // chunks: [v2i.c0+c2, v2i.c1+c3, v2i+1.c0+c2, v2i+1.c1+c3]
    w[i] = _mm512_add_ps(_mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], 0x44),
                         _mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], 0xee));
  }
  for (int i = 0; i < 4; ++i) {  // chunk c ← input 4i + c
    u[i] = _mm512_add_ps(_mm512_shuffle_f32x4(w[2 * i], w[2 * i + 1], 0x88),
                         _mm512_shuffle_f32x4(w[2 * i], w[2 * i + 1], 0xdd));
  }
  for (int i = 0; i < 2; ++i) {  // chunk c: lanes 0,1 ← input 8i + c; lanes 2,3 ← 8i + 4 + c
    r[i] = _mm512_add_ps(_mm512_shuffle_ps(u[2 * i], u[2 * i + 1], 0x44),
                         _mm512_shuffle_ps(u[2 * i], u[2 * i + 1], 0xee));
  }
  // lane 4c + l ← input c + 4l; put input j in lane j.
  const __m512 s = _mm512_add_ps(_mm512_shuffle_ps(r[0], r[1], 0x88), _mm512_shuffle_ps(r[0], r[1], 0xdd));
  const __m512i idx = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  return _mm512_permutexvar_ps(idx, s);
}

// out_h[hd] += w_h · v[hd] for H heads that share the KV head, NC = hd / 16 register-resident
// chunks each: V is loaded once per position for all H heads, and H · NC independent FMA chains
// hide the FMA latency one head's NC chains leave exposed. Each head's sums run over its
// positions in order, whatever H is, so its bits are those of a one-head call (H = 1).
template <int NC, int H>
LOOM_AVX512 inline void AccumulateVHeads(const float* scores, int64_t scores_stride,
                                         const float* inv, const PagedKvHead& kv, int first,
                                         int last, int hd, float* out, int64_t out_stride) {
  __m512 o[H][NC];
  for (int h = 0; h < H; ++h) {
    for (int c = 0; c < NC; ++c) o[h][c] = _mm512_setzero_ps();
  }
  for (int p = first; p <= last; ++p) {
    const float* v = KvRow(kv.v, kv, p, hd);
    __m512 vc[NC];
    for (int c = 0; c < NC; ++c) vc[c] = _mm512_loadu_ps(v + 16 * c);
    for (int h = 0; h < H; ++h) {
      const __m512 w = _mm512_set1_ps(scores[h * scores_stride + p] * inv[h]);
      for (int c = 0; c < NC; ++c) o[h][c] = _mm512_fmadd_ps(w, vc[c], o[h][c]);
    }
  }
  for (int h = 0; h < H; ++h) {
    for (int c = 0; c < NC; ++c) _mm512_storeu_ps(out + h * out_stride + 16 * c, o[h][c]);
  }
}

// The dot products of one 16-key block: acc[j] = lane-wise Σ q·K[p0 + j] over the head's
// 16-float chunks in order (lanes outside `live` stay zero). NC > 0: q is held in NC registers
// (hd = 16·NC); NC == 0: any hd, q read from memory, a masked tail chunk last.
template <int NC>
LOOM_AVX512 inline void BlockDots(const float* q, const __m512* qr, int hd, const float* kb,
                                  __mmask16 live, __m512 (&acc)[16]) {
  const int full = hd & ~15;
  const __mmask16 tail = static_cast<__mmask16>((1u << (hd - full)) - 1);
  for (int j = 0; j < 16; ++j) {
    const float* k = kb + j * hd;
    __m512 a = _mm512_setzero_ps();
    if ((live >> j) & 1) {
      if constexpr (NC > 0) {
        for (int c = 0; c < NC; ++c) a = _mm512_fmadd_ps(qr[c], _mm512_loadu_ps(k + 16 * c), a);
      } else {
        for (int d = 0; d < full; d += 16)
          a = _mm512_fmadd_ps(_mm512_loadu_ps(q + d), _mm512_loadu_ps(k + d), a);
        if (tail)
          a = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(tail, q + full),
                              _mm512_maskz_loadu_ps(tail, k + full), a);
      }
    }
    acc[j] = a;
  }
}

// One head's softmax weights: scores[p] = exp(s_p − max) over [first, last], s_p the scaled (and
// soft-capped) q·K[p]; returns 1 / Σ. Keys 16 at a time (one cache block: 16 consecutive
// positions of a head are contiguous), folded by HorizontalSums16, the exp 16 lanes at a time.
template <int NC>
LOOM_AVX512 float SoftmaxWeights(const float* q, int hd, const PagedKvHead& kv, int first, int last,
                                 float scale, float softcap, float* scores) {
  __m512 qr[NC > 0 ? NC : 1];
  if constexpr (NC > 0) {
    for (int c = 0; c < NC; ++c) qr[c] = _mm512_loadu_ps(q + 16 * c);
  }
  __m512 vmax = _mm512_set1_ps(-INFINITY);
  for (int p0 = first & ~15; p0 <= last; p0 += 16) {
    // Lanes of this block inside [first, last].
    const int lo = std::max(first - p0, 0), hi = std::min(last - p0, 15);
    const __mmask16 live = static_cast<__mmask16>(((1u << (hi + 1)) - 1) & ~((1u << lo) - 1));
    __m512 acc[16];
    BlockDots<NC>(q, qr, hd, KvRow(kv.k, kv, p0, hd), live, acc);  // K block: [16, hd]
    __m512 s = _mm512_mul_ps(HorizontalSums16(acc), _mm512_set1_ps(scale));
    if (softcap > 0) {
      alignas(64) float tmp[16];
      _mm512_store_ps(tmp, s);
      for (float& t : tmp) t = SoftCap(t, softcap);
      s = _mm512_load_ps(tmp);
    }
    _mm512_mask_storeu_ps(scores + p0, live, s);
    vmax = _mm512_mask_max_ps(vmax, live, vmax, s);
  }
  const float mx = _mm512_reduce_max_ps(vmax);
  const __m512 vmx = _mm512_set1_ps(mx);
  __m512 vsum = _mm512_setzero_ps();
  for (int p0 = first & ~15; p0 <= last; p0 += 16) {
    const int lo = std::max(first - p0, 0), hi = std::min(last - p0, 15);
    const __mmask16 live = static_cast<__mmask16>(((1u << (hi + 1)) - 1) & ~((1u << lo) - 1));
    const __m512 e = ExpNonPositive(_mm512_sub_ps(_mm512_maskz_loadu_ps(live, scores + p0), vmx));
    const __m512 el = _mm512_maskz_mov_ps(live, e);
    _mm512_mask_storeu_ps(scores + p0, live, el);
    vsum = _mm512_add_ps(vsum, el);
  }
  return 1.0f / _mm512_reduce_add_ps(vsum);
}

// Heads of one KV head with hd = 16·NC, up to 16 / NC at a time through AccumulateVHeads.
template <int NC>
LOOM_AVX512 void AttendHeadsFixed(int heads, const float* q, int64_t q_stride,
                                  const PagedKvHead& kv, int first, int last, float scale,
                                  float softcap, float* scores, int64_t scores_stride, float* out,
                                  int64_t out_stride) {
  constexpr int hd = 16 * NC;
  constexpr int kMax = std::max(1, 16 / NC);
  for (int h0 = 0; h0 < heads; h0 += kMax) {
    const int n = std::min(kMax, heads - h0);
    float inv[kMax];
    for (int h = 0; h < n; ++h) {
      inv[h] = SoftmaxWeights<NC>(q + (h0 + h) * q_stride, hd, kv, first, last, scale, softcap,
                                  scores + (h0 + h) * scores_stride);
    }
    const float* sc = scores + h0 * scores_stride;
    float* o = out + h0 * out_stride;
    switch (n) {
      case 1:
        AccumulateVHeads<NC, 1>(sc, scores_stride, inv, kv, first, last, hd, o, out_stride);
        break;
      case 2:
        if constexpr (kMax >= 2)
          AccumulateVHeads<NC, 2>(sc, scores_stride, inv, kv, first, last, hd, o, out_stride);
        break;
      case 3:
        if constexpr (kMax >= 3)
          AccumulateVHeads<NC, 3>(sc, scores_stride, inv, kv, first, last, hd, o, out_stride);
        break;
      default:
        if constexpr (kMax >= 4)
          AccumulateVHeads<NC, 4>(sc, scores_stride, inv, kv, first, last, hd, o, out_stride);
        break;
    }
  }
}
}  // namespace

// Every score and sum has an order fixed by the row's own positions and head, so a row's result
// never depends on the other rows, nor on how many heads one call takes.
LOOM_AVX512 void AttendHeadsAvx512(int heads, const float* q, int64_t q_stride, int hd,
                                   const PagedKvHead& kv, int first, int last, float scale,
                                   float softcap, float* scores, int64_t scores_stride, float* out,
                                   int64_t out_stride) {
  switch (hd) {
    case 64:
      return AttendHeadsFixed<4>(heads, q, q_stride, kv, first, last, scale, softcap, scores,
                                 scores_stride, out, out_stride);
    case 128:
      return AttendHeadsFixed<8>(heads, q, q_stride, kv, first, last, scale, softcap, scores,
                                 scores_stride, out, out_stride);
    case 256:
      return AttendHeadsFixed<16>(heads, q, q_stride, kv, first, last, scale, softcap, scores,
                                  scores_stride, out, out_stride);
    default: break;
  }
  const int full = hd & ~15;
  const __mmask16 tail = static_cast<__mmask16>((1u << (hd - full)) - 1);
  for (int h = 0; h < heads; ++h) {
    float* sc = scores + h * scores_stride;
    const float inv = SoftmaxWeights<0>(q + h * q_stride, hd, kv, first, last, scale, softcap, sc);
    for (int d = 0; d < hd; d += 16) {
      const __mmask16 m = d + 16 <= hd ? static_cast<__mmask16>(0xffff) : tail;
      __m512 o = _mm512_setzero_ps();
      for (int p = first; p <= last; ++p) {
        const float* v = KvRow(kv.v, kv, p, hd);
        o = _mm512_fmadd_ps(_mm512_set1_ps(sc[p] * inv), _mm512_maskz_loadu_ps(m, v + d), o);
      }
      _mm512_mask_storeu_ps(out + h * out_stride + d, m, o);
    }
  }
}

void AttendRowAvx512(const float* q, int hd, const PagedKvHead& kv, int first, int last,
                     float scale, float softcap, float* scores, float* out) {
  AttendHeadsAvx512(1, q, hd, hd, kv, first, last, scale, softcap, scores, 0, out, hd);
}

void AttendHeads(Isa isa, int heads, const float* q, int64_t q_stride, int hd,
                 const PagedKvHead& kv, int first, int last, float scale, float softcap,
                 float* scores, int64_t scores_stride, float* out, int64_t out_stride) {
  if (isa >= Isa::kAvx512) {
    return AttendHeadsAvx512(heads, q, q_stride, hd, kv, first, last, scale, softcap, scores,
                             scores_stride, out, out_stride);
  }
  for (int h = 0; h < heads; ++h) {
    AttendRow(isa, q + h * q_stride, hd, kv, first, last, scale, softcap,
              scores + h * scores_stride, out + h * out_stride);
  }
}

void AttendRow(Isa isa, const float* q, int hd, const PagedKvHead& kv, int first, int last,
               float scale, float softcap, float* scores, float* out) {
  switch (isa) {
    case Isa::kAmx:
    case Isa::kAvx512Bf16:
    case Isa::kAvx512: return AttendRowAvx512(q, hd, kv, first, last, scale, softcap, scores, out);
    case Isa::kAvx2: return AttendRowAvx2(q, hd, kv, first, last, scale, softcap, scores, out);
    case Isa::kScalar: return AttendRowScalar(q, hd, kv, first, last, scale, softcap, scores, out);
  }
}

}  // namespace loom::cpu
