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
#include <type_traits>

#include "cpu/exp_poly.h"
#include "cpu/widen16_avx512.h"
#include "tensor/dtype.h"

// f16c: the widen16_avx512.h loaders carry it (every AVX-512 CPU has it), and inline only into
// functions whose target includes theirs.
#define LOOM_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma,f16c")))

namespace loom::cpu {

namespace {
// transformers' order: divide, tanh, multiply (Gemma 2 attn_logit_softcapping).
inline float SoftCap(float s, float cap) { return cap > 0 ? std::tanh(s / cap) * cap : s; }
}  // namespace

namespace {
inline float KvFloat(float x) { return x; }
inline float KvFloat(uint16_t bf16) { return Bf16ToF32(bf16); }

template <typename T>
void AttendRowScalarT(const float* q, int hd, const PagedKvHeadT<T>& kv, int first, int last,
                      float scale, float softcap, float* scores, float* out) {
  float mx = -INFINITY;
  for (int p = first; p <= last; ++p) {
    const T* k = KeyBlock(kv, p);
    float dot = 0;
    for (int d = 0; d < hd; ++d) dot += q[d] * KvFloat(k[KeyIndex<T>(p % 16, d)]);
    scores[p] = SoftCap(dot * scale, softcap);
    mx = std::max(mx, scores[p]);
  }
  float sum = 0;
  for (int p = first; p <= last; ++p) sum += scores[p] = std::exp(scores[p] - mx);
  const float inv = 1.0f / sum;
  for (int d = 0; d < hd; ++d) out[d] = 0;
  for (int p = first; p <= last; ++p) {
    const T* v = ValueRow(kv, p, hd);
    const float w = scores[p] *= inv;
    for (int d = 0; d < hd; ++d) out[d] += w * KvFloat(v[d]);
  }
}
}  // namespace

void AttendRowScalar(const float* q, int hd, const PagedKvHead& kv, int first, int last,
                     float scale, float softcap, float* scores, float* out) {
  AttendRowScalarT(q, hd, kv, first, last, scale, softcap, scores, out);
}
void AttendRowScalar(const float* q, int hd, const PagedKvHeadBf16& kv, int first, int last,
                     float scale, float softcap, float* scores, float* out) {
  AttendRowScalarT(q, hd, kv, first, last, scale, softcap, scores, out);
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

// The widen16_avx512.h loader of a cache element type (bf16 widened exactly: its bits are the
// f32's high half).
template <typename T>
using Widen16Of = std::conditional_t<std::is_same_v<T, float>, Widen16F32, Widen16Bf16>;

// 32 bf16 values at p (64 bytes) as two 16-lane f32 vectors: even = elements 0, 2, .., 30 (shifted
// up), odd = 1, 3, .., 31 (masked): one ALU µop per 16 lanes, where a widening move and a shift
// (Widen16Bf16::Load) take two, both competing with the FMAs for ports 0 and 5.
LOOM_AVX512 inline void WidenBf16Pairs(const uint16_t* p, __m512& even, __m512& odd) {
  const __m512i x = _mm512_loadu_si512(p);
  even = _mm512_castsi512_ps(_mm512_slli_epi32(x, 16));
  odd = _mm512_castsi512_ps(_mm512_and_si512(x, _mm512_set1_epi32(~0xffff)));
}

// out_h[hd] += w_h[p] · v[hd] for H heads that share the KV head (w: the softmax weights, already
// divided by their sum), NC = hd / 16 register-resident chunks each: V is loaded once per position
// for all H heads, and H · NC independent FMA chains hide the FMA latency one head's NC chains
// leave exposed. Each head's sums run over its positions in order, whatever H is, so its bits are
// those of a one-head call (H = 1). A bf16 V row is widened 32 elements per 64-byte load, as its
// even elements (shifted up) and odd ones (masked): 2 ALU µops per 32 instead of 4 (widening
// moves and shifts compete with the FMAs for ports 0 and 5); register c = 2i + 1 then holds the
// odd elements of dimensions 32i.., interleaved back on the store. Each element's sum is the
// same FMAs in the same order as over f32.
template <int NC, int H, typename T>
LOOM_AVX512 inline void AccumulateVHeads(const float* w, int64_t w_stride,
                                         const PagedKvHeadT<T>& kv, int first, int last, int hd,
                                         float* out, int64_t out_stride) {
  __m512 o[H][NC];
  for (int h = 0; h < H; ++h) {
    for (int c = 0; c < NC; ++c) o[h][c] = _mm512_setzero_ps();
  }
  for (int p = first; p <= last; ++p) {
    const T* v = ValueRow(kv, p, hd);
    __m512 vc[NC];
    if constexpr (std::is_same_v<T, uint16_t>) {
      static_assert(NC % 2 == 0, "bf16 V is widened in pairs of 16-lane chunks");
      for (int c = 0; c < NC; c += 2) WidenBf16Pairs(v + 16 * c, vc[c], vc[c + 1]);
    } else {
      for (int c = 0; c < NC; ++c) vc[c] = _mm512_loadu_ps(v + 16 * c);
    }
    for (int h = 0; h < H; ++h) {
      const __m512 wh = _mm512_set1_ps(w[h * w_stride + p]);
      for (int c = 0; c < NC; ++c) o[h][c] = _mm512_fmadd_ps(wh, vc[c], o[h][c]);
    }
  }
  if constexpr (std::is_same_v<T, uint16_t>) {
    const __m512i lo = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
    const __m512i hi = _mm512_add_epi32(lo, _mm512_set1_epi32(8));
    for (int h = 0; h < H; ++h) {
      for (int c = 0; c < NC; c += 2) {
        float* dst = out + h * out_stride + 16 * c;
        _mm512_storeu_ps(dst, _mm512_permutex2var_ps(o[h][c], lo, o[h][c + 1]));
        _mm512_storeu_ps(dst + 16, _mm512_permutex2var_ps(o[h][c], hi, o[h][c + 1]));
      }
    }
  } else {
    for (int h = 0; h < H; ++h) {
      for (int c = 0; c < NC; ++c) _mm512_storeu_ps(out + h * out_stride + 16 * c, o[h][c]);
    }
  }
}

// Lanes of the 16-position block at p0 inside [first, last].
inline __mmask16 LiveLanes(int p0, int first, int last) {
  const int lo = std::max(first - p0, 0), hi = std::min(last - p0, 15);
  return static_cast<__mmask16>(((1u << (hi + 1)) - 1) & ~((1u << lo) - 1));
}

// Raw scores of H heads over the B blocks from p0 (a multiple of 16): lane j of acc[h][b] =
// Σ_d q_h[d]·K[p0 + 16b + j][d], one FMA chain per lane in d order — so a score's bits depend on
// nothing but its q and key, whatever H and B are. The transposed K rows are loaded once for all
// H heads; H · B chains hide the FMA latency.
template <int H, int B, typename T>
LOOM_AVX512 inline void ScoreBlocks(const float* q, int64_t q_stride, int hd,
                                    const PagedKvHeadT<T>& kv, int p0, __m512 (&acc)[H][B]) {
  const T* kt[B];  // each [hd, 16]
  for (int b = 0; b < B; ++b) kt[b] = KeyBlock(kv, p0 + 16 * b);
  for (int h = 0; h < H; ++h) {
    for (int b = 0; b < B; ++b) acc[h][b] = _mm512_setzero_ps();
  }
  if constexpr (std::is_same_v<T, uint16_t>) {  // dimension pairs: KeyIndex's bf16 layout
    for (int d = 0; d < hd; d += 2) {
      __m512 ke[B], ko[B];
      for (int b = 0; b < B; ++b) WidenBf16Pairs(kt[b] + 16 * d, ke[b], ko[b]);
      for (int h = 0; h < H; ++h) {
        const __m512 q0 = _mm512_set1_ps(q[h * q_stride + d]);
        const __m512 q1 = _mm512_set1_ps(q[h * q_stride + d + 1]);
        for (int b = 0; b < B; ++b) acc[h][b] = _mm512_fmadd_ps(q0, ke[b], acc[h][b]);
        for (int b = 0; b < B; ++b) acc[h][b] = _mm512_fmadd_ps(q1, ko[b], acc[h][b]);
      }
    }
  } else {
    for (int d = 0; d < hd; ++d) {
      __m512 kd[B];
      for (int b = 0; b < B; ++b) kd[b] = _mm512_loadu_ps(kt[b] + 16 * d);
      for (int h = 0; h < H; ++h) {
        const __m512 qd = _mm512_set1_ps(q[h * q_stride + d]);
        for (int b = 0; b < B; ++b) acc[h][b] = _mm512_fmadd_ps(qd, kd[b], acc[h][b]);
      }
    }
  }
}

// One block's raw dot products → scaled (and soft-capped) scores of its live lanes in scores[p0..];
// vmax the lane-wise maximum.
LOOM_AVX512 inline void FinishScores(__m512 acc, __m512 vscale, float softcap, int p0, int first,
                                     int last, float* scores, __m512& vmax) {
  __m512 s = _mm512_mul_ps(acc, vscale);
  if (softcap > 0) {
    alignas(64) float tmp[16];
    _mm512_store_ps(tmp, s);
    for (float& t : tmp) t = SoftCap(t, softcap);
    s = _mm512_load_ps(tmp);
  }
  const __mmask16 live = LiveLanes(p0, first, last);
  _mm512_mask_storeu_ps(scores + p0, live, s);
  vmax = _mm512_mask_max_ps(vmax, live, vmax, s);
}

// Scaled (and soft-capped) scores of H heads into scores + h·scores_stride over [first, last];
// vmax[h] the lane-wise maximum of head h's live scores.
template <int H, int B, typename T>
LOOM_AVX512 void ScorePass(const float* q, int64_t q_stride, int hd, const PagedKvHeadT<T>& kv,
                           int first, int last, float scale, float softcap, float* scores,
                           int64_t scores_stride, __m512 (&vmax)[H]) {
  for (int h = 0; h < H; ++h) vmax[h] = _mm512_set1_ps(-INFINITY);
  const __m512 vscale = _mm512_set1_ps(scale);
  int p0 = first & ~15;
  for (; p0 + 16 * (B - 1) <= last; p0 += 16 * B) {  // B whole blocks inside the table
    __m512 acc[H][B];
    ScoreBlocks<H, B>(q, q_stride, hd, kv, p0, acc);
    for (int h = 0; h < H; ++h) {
      for (int b = 0; b < B; ++b) {
        FinishScores(acc[h][b], vscale, softcap, p0 + 16 * b, first, last,
                     scores + h * scores_stride, vmax[h]);
      }
    }
  }
  for (; p0 <= last; p0 += 16) {
    __m512 acc[H][1];
    ScoreBlocks<H, 1>(q, q_stride, hd, kv, p0, acc);
    for (int h = 0; h < H; ++h) {
      FinishScores(acc[h][0], vscale, softcap, p0, first, last, scores + h * scores_stride,
                   vmax[h]);
    }
  }
}

// Scores → softmax weights in place for one head: exp(s − max) / Σ over [first, last].
LOOM_AVX512 void SoftmaxInPlace(float* scores, int first, int last, __m512 vmax) {
  const __m512 vmx = _mm512_set1_ps(_mm512_reduce_max_ps(vmax));
  __m512 vsum = _mm512_setzero_ps();
  for (int p0 = first & ~15; p0 <= last; p0 += 16) {
    const __mmask16 live = LiveLanes(p0, first, last);
    const __m512 e = ExpNonPositive(_mm512_sub_ps(_mm512_maskz_loadu_ps(live, scores + p0), vmx));
    const __m512 el = _mm512_maskz_mov_ps(live, e);
    _mm512_mask_storeu_ps(scores + p0, live, el);
    vsum = _mm512_add_ps(vsum, el);
  }
  const __m512 inv = _mm512_set1_ps(1.0f / _mm512_reduce_add_ps(vsum));
  for (int p0 = first & ~15; p0 <= last; p0 += 16) {
    const __mmask16 live = LiveLanes(p0, first, last);
    _mm512_mask_storeu_ps(scores + p0, live,
                          _mm512_mul_ps(_mm512_maskz_loadu_ps(live, scores + p0), inv));
  }
}

// Softmax weights of n ≤ 8 heads (h0.. of the call) into their score rows.
template <int H, typename T>
LOOM_AVX512 void WeightsOfHeads(const float* q, int64_t q_stride, int hd, const PagedKvHeadT<T>& kv,
                                int first, int last, float scale, float softcap, float* scores,
                                int64_t scores_stride) {
  constexpr int B = H == 1 ? 8 : H == 2 ? 4 : 2;
  __m512 vmax[H];
  ScorePass<H, B>(q, q_stride, hd, kv, first, last, scale, softcap, scores, scores_stride, vmax);
  for (int h = 0; h < H; ++h) SoftmaxInPlace(scores + h * scores_stride, first, last, vmax[h]);
}

template <typename T>
LOOM_AVX512 void Weights(int heads, const float* q, int64_t q_stride, int hd,
                         const PagedKvHeadT<T>& kv, int first, int last, float scale, float softcap,
                         float* scores, int64_t scores_stride) {
  for (int h0 = 0; h0 < heads; h0 += 8) {
    const float* qh = q + h0 * q_stride;
    float* sc = scores + h0 * scores_stride;
    switch (std::min(8, heads - h0)) {
#define LOOM_WEIGHTS_CASE(n)                                                                 \
  case n:                                                                                    \
    WeightsOfHeads<n>(qh, q_stride, hd, kv, first, last, scale, softcap, sc, scores_stride); \
    break;
      LOOM_WEIGHTS_CASE(1)
      LOOM_WEIGHTS_CASE(2)
      LOOM_WEIGHTS_CASE(3)
      LOOM_WEIGHTS_CASE(4)
      LOOM_WEIGHTS_CASE(5)
      LOOM_WEIGHTS_CASE(6)
      LOOM_WEIGHTS_CASE(7)
      LOOM_WEIGHTS_CASE(8)
#undef LOOM_WEIGHTS_CASE
      default:
        break;
    }
  }
}

// V for heads of one KV head with hd = 16·NC, up to 16 / NC at a time through AccumulateVHeads.
template <int NC, typename T>
LOOM_AVX512 void AccumulateVFixed(int heads, const PagedKvHeadT<T>& kv, int first, int last,
                                  const float* w, int64_t w_stride, float* out,
                                  int64_t out_stride) {
  constexpr int hd = 16 * NC;
  constexpr int kMax = std::max(1, 16 / NC);
  for (int h0 = 0; h0 < heads; h0 += kMax) {
    const int n = std::min(kMax, heads - h0);
    const float* wh = w + h0 * w_stride;
    float* o = out + h0 * out_stride;
    switch (n) {
      case 1:
        AccumulateVHeads<NC, 1>(wh, w_stride, kv, first, last, hd, o, out_stride);
        break;
      case 2:
        if constexpr (kMax >= 2)
          AccumulateVHeads<NC, 2>(wh, w_stride, kv, first, last, hd, o, out_stride);
        break;
      case 3:
        if constexpr (kMax >= 3)
          AccumulateVHeads<NC, 3>(wh, w_stride, kv, first, last, hd, o, out_stride);
        break;
      default:
        if constexpr (kMax >= 4)
          AccumulateVHeads<NC, 4>(wh, w_stride, kv, first, last, hd, o, out_stride);
        break;
    }
  }
}

// Every score and sum has an order fixed by the row's own positions and head, so a row's result
// never depends on the other rows, nor on how many heads one call takes.
template <typename T>
LOOM_AVX512 void AttendHeadsAvx512T(int heads, const float* q, int64_t q_stride, int hd,
                                    const PagedKvHeadT<T>& kv, int first, int last, float scale,
                                    float softcap, float* scores, int64_t scores_stride, float* out,
                                    int64_t out_stride) {
  Weights(heads, q, q_stride, hd, kv, first, last, scale, softcap, scores, scores_stride);
  switch (hd) {
    case 64:
      return AccumulateVFixed<4>(heads, kv, first, last, scores, scores_stride, out, out_stride);
    case 128:
      return AccumulateVFixed<8>(heads, kv, first, last, scores, scores_stride, out, out_stride);
    case 256:
      return AccumulateVFixed<16>(heads, kv, first, last, scores, scores_stride, out, out_stride);
    default: break;
  }
  const int full = hd & ~15;
  const __mmask16 tail = static_cast<__mmask16>((1u << (hd - full)) - 1);
  for (int h = 0; h < heads; ++h) {
    const float* w = scores + h * scores_stride;
    for (int d = 0; d < hd; d += 16) {
      const __mmask16 m = d + 16 <= hd ? static_cast<__mmask16>(0xffff) : tail;
      __m512 o = _mm512_setzero_ps();
      for (int p = first; p <= last; ++p) {
        o = _mm512_fmadd_ps(_mm512_set1_ps(w[p]),
                            Widen16Of<T>::LoadMasked(ValueRow(kv, p, hd) + d, m), o);
      }
      _mm512_mask_storeu_ps(out + h * out_stride + d, m, o);
    }
  }
}

template <typename T>
void AttendHeadsT(Isa isa, int heads, const float* q, int64_t q_stride, int hd,
                  const PagedKvHeadT<T>& kv, int first, int last, float scale, float softcap,
                  float* scores, int64_t scores_stride, float* out, int64_t out_stride) {
  if (isa >= Isa::kAvx512) {
    return AttendHeadsAvx512T(heads, q, q_stride, hd, kv, first, last, scale, softcap, scores,
                              scores_stride, out, out_stride);
  }
  if (isa == Isa::kAvx2) {
    return AttendHeadsAvx2(heads, q, q_stride, hd, kv, first, last, scale, softcap, scores,
                           scores_stride, out, out_stride);
  }
  for (int h = 0; h < heads; ++h) {
    AttendRow(isa, q + h * q_stride, hd, kv, first, last, scale, softcap,
              scores + h * scores_stride, out + h * out_stride);
  }
}

template <typename T>
void AttendRowT(Isa isa, const float* q, int hd, const PagedKvHeadT<T>& kv, int first, int last,
                float scale, float softcap, float* scores, float* out) {
  switch (isa) {
    case Isa::kAmx:
    case Isa::kAvx512Bf16:
    case Isa::kAvx512:
      return AttendHeadsAvx512T(1, q, hd, hd, kv, first, last, scale, softcap, scores, 0, out, hd);
    case Isa::kAvx2: return AttendRowAvx2(q, hd, kv, first, last, scale, softcap, scores, out);
    case Isa::kScalar:
      return AttendRowScalarT(q, hd, kv, first, last, scale, softcap, scores, out);
  }
}
}  // namespace

#define LOOM_ATTENTION_ENTRY_POINTS(KV)                                                           \
  void AttendHeadsAvx512(int heads, const float* q, int64_t q_stride, int hd, const KV& kv,       \
                         int first, int last, float scale, float softcap, float* scores,          \
                         int64_t scores_stride, float* out, int64_t out_stride) {                 \
    AttendHeadsAvx512T(heads, q, q_stride, hd, kv, first, last, scale, softcap, scores,           \
                       scores_stride, out, out_stride);                                           \
  }                                                                                               \
  void AttendRowAvx512(const float* q, int hd, const KV& kv, int first, int last, float scale,    \
                       float softcap, float* scores, float* out) {                                \
    AttendHeadsAvx512T(1, q, hd, hd, kv, first, last, scale, softcap, scores, 0, out, hd);        \
  }                                                                                               \
  void AttendHeads(Isa isa, int heads, const float* q, int64_t q_stride, int hd, const KV& kv,    \
                   int first, int last, float scale, float softcap, float* scores,                \
                   int64_t scores_stride, float* out, int64_t out_stride) {                       \
    AttendHeadsT(isa, heads, q, q_stride, hd, kv, first, last, scale, softcap, scores,            \
                 scores_stride, out, out_stride);                                                 \
  }                                                                                               \
  void AttendRow(Isa isa, const float* q, int hd, const KV& kv, int first, int last, float scale, \
                 float softcap, float* scores, float* out) {                                      \
    AttendRowT(isa, q, hd, kv, first, last, scale, softcap, scores, out);                         \
  }
LOOM_ATTENTION_ENTRY_POINTS(PagedKvHead)
LOOM_ATTENTION_ENTRY_POINTS(PagedKvHeadBf16)
#undef LOOM_ATTENTION_ENTRY_POINTS

}  // namespace loom::cpu
