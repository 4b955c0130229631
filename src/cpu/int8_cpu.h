// Int8 (W8A8) matmul kernels over 16-column panels: y = sx[r]·sw[j]·Σ_k xq[r,k]·wq[j,k], exact int32 sums, one function per ISA.
#pragma once

#include <cstdint>
#include <vector>

#include "cpu/cpu_features.h"
#include "cpu/side_prefetch.h"

namespace loom::cpu {

// Largest k the int32 accumulators hold exactly: 255·127·k < 2³¹ (the kernels sum the
// activations biased to u8).
inline constexpr int64_t kMaxInt8Depth = 65536;

// Layout. Output columns (weight rows) are stored in panels of 16, inputs padded with zeros to
// k_pad, a multiple of kInt8Align. A panel is k_pad / 4 blocks of 64 bytes; in block t, byte
// 4c + e is column c's input 4t + e: the operand layout of vpdpbusd with 4 broadcast activations
// (and of an AMX-INT8 B tile).
inline constexpr int64_t kInt8Align = 64;
inline constexpr int64_t kInt8Panel = 16;
// Every int8 kernel's tile (below the AMX-INT8 threshold) prefetches each panel stream this far
// ahead: with several rows the hardware prefetcher alone fell behind the weight stream on every
// kernel, with one row on the plain AVX2 kernel (two multiply uops per 32 products: 49-51 →
// 57.5-58.6 tok/s at batch 1 when it came). 0.5B shape, int8 + head, 2 threads, Emerald Rapids,
// `loom bench --batch 4 8 16`, old and new binary interleaved, 2 rounds, batch 4 / 8 / 16 (batch
// 1 unchanged): avx512vnni 155-158 → 176-181 / 223-224 → 240-247 / unchanged (AMX-INT8 from 16
// rows), avx-vnni (`LOOM_ISA=avx2`) 114 → 139-141 / 153-154 → 191-195 / 213-215 → 262-263, avx2
// (`LOOM_AVXVNNI=0`) 69-70 → 128-129 / 99-100 → 155-158 / 133-137 → 185.
inline constexpr int64_t kInt8PrefetchAhead = 2048;

// The int8 and int4 kernels take a block's activation rows in groups (AVX512_VNNI 8, then 4,
// then 1–3; the AVX2-level ones 3 or 4 at most), each group reading the block's weight panels
// once. With more than one row, MatmulInt8 / MatmulInt4 hand a block to the kernel in chunks of
// kIntChunkColumns (8 panels: 57 KB of int4 at k = 896, 608 KB of int8 at k = 4864), so a later
// group finds the chunk in L2 instead of streaming the block from DRAM again. One row keeps the
// whole block (the AVX2-level kernels read it as several long streams, AVX512_VNNI panel by
// panel as one).
inline constexpr int64_t kIntChunkColumns = 128;
// fn(c0, c1) over [j0, j1) in chunks of kIntChunkColumns for more than one row, else once.
template <typename Fn>
void ForEachIntChunk(int64_t n, int64_t j0, int64_t j1, const Fn& fn) {
  const int64_t chunk = n > 1 ? kIntChunkColumns : j1 - j0;
  for (int64_t c = j0; c < j1; c += chunk) fn(c, c + chunk < j1 ? c + chunk : j1);
}

// AVX512_VNNI (vpdpbusd) on top of the kAvx512 level.
bool HasAvx512Vnni();
// AVX-VNNI (VEX-encoded vpdpbusd on ymm: Alder Lake, Sapphire Rapids, Zen 5 and later) on top of
// the kAvx2 level. LOOM_AVXVNNI=0 hides it (to run and measure the plain AVX2 kernel).
bool HasAvxVnni();

// The kernel an ISA level runs for int8 and int4 (decode, and prefill where AMX is not used):
// from kAvx512 AVX512_VNNI where the CPU has it; else from kAvx2 AVX-VNNI where the CPU has it,
// else AVX2 (vpmaddubsw + vpmaddwd); else scalar. All return the same bits.
enum class IntKernel { kScalar, kAvx2, kAvxVnni, kAvx512Vnni };
IntKernel IntKernelFor(Isa isa);
// Tests: every level runs `kernel` (capped at what the level would pick) until reset with
// `reset` = true, so a model can run one int kernel and another with every other op unchanged.
void SetIntKernelCapForTesting(IntKernel kernel, bool reset = false);
const char* IntKernelName(IntKernel kernel);

// Symmetric per-row quantization: s = max|x[r]|/127, xq = clamp(rint(x / s), ±127) (round half
// to even). An all-zero row gets s = 0 and xq = 0. x: [n, k] f32; xq: [n, k]; sx: [n].
// Dispatches on the active ISA level (AVX-512 from kAvx512; every level gives the same bits,
// a NaN element included: it quantizes to 0).
void QuantizeRowsInt8(const float* x, int64_t n, int64_t k, int8_t* xq, float* sx);

// y[i] = x[i] rounded to f16 (round to nearest even, overflow to ±Inf, f16 subnormals kept) and
// widened back: torch's x.to(float16) (LLM.int8's activations). F16C from the avx2 level (every
// AVX2 CPU has it), the same bits as the scalar F32ToF16 (NaN stays NaN, payload aside).
void RoundToF16(const float* x, int64_t n, float* y);
void RoundToF16Scalar(const float* x, int64_t n, float* y);
void RoundToF16F16c(const float* x, int64_t n, float* y);
// LLM.int8's activation row after RoundToF16 (ops/matmul_int8.cc LlmInt8Row): elements of h
// with |h| ≥ threshold (> 0; none when threshold ≤ 0) are set to 0 and their indices appended to
// `outliers` in order; returns max |h| of the rest (NaN skipped). Then xq[i] = rint(h[i] · inv)
// (round half to even) where that lies in ±127, else 0 (NaN included). AVX2 from the avx2 level,
// the same bits as the scalar steps.
float LlmInt8OutliersAndMax(float* h, int64_t k, float threshold, std::vector<int64_t>* outliers);
float LlmInt8OutliersAndMaxScalar(float* h, int64_t k, float threshold, std::vector<int64_t>* outliers);
float LlmInt8OutliersAndMaxAvx2(float* h, int64_t k, float threshold, std::vector<int64_t>* outliers);
void LlmInt8Quantize(const float* h, int64_t k, float inv, int8_t* xq);
void LlmInt8QuantizeScalar(const float* h, int64_t k, float inv, int8_t* xq);
void LlmInt8QuantizeAvx2(const float* h, int64_t k, float inv, int8_t* xq);
void QuantizeRowsInt8Scalar(const float* x, int64_t n, int64_t k, int8_t* xq, float* sx);
void QuantizeRowsInt8Avx512(const float* x, int64_t n, int64_t k, int8_t* xq, float* sx);
void QuantizeRowsInt8Avx2(const float* x, int64_t n, int64_t k, int8_t* xq, float* sx);

// q: [16, k_pad] row-major (the panel's 16 columns); out: [16 · k_pad] in the panel layout.
void PackInt8Panel(const int8_t* q, int64_t k_pad, int8_t* out);

// y[r, j − j0] (row stride ldy) for j in [j0, j1), j0 a multiple of 16:
//   xu [n, k_pad] activations biased to u8 (xq + 128, xq in −127..127 as QuantizeRowsInt8
//   makes them, so xu ≥ 1; padding 128), sx [n] their row scales;
//   wq: panels; sw [m_pad] weight row scales; wsum [m_pad] Σ_k wq[j, k].
// Every ISA returns the same bits: the integer sum is exact and
// y = float(Σ (xu − 128)·wq) · (sx[r] · sw[j]) in that order.
// `side`, if given: bytes the caller reads after the call (SidePrefetch), issued a line per step
// of the AVX512_VNNI kernel's loop (the other levels leave them to the hardware).
void MatmulInt8(Isa isa, const uint8_t* xu, const float* sx, int64_t n, int64_t k_pad,
                const int8_t* wq, const float* sw, const int32_t* wsum, int64_t j0, int64_t j1,
                float* y, int64_t ldy, SidePrefetch* side = nullptr);

// AMX-INT8 (TDPBUSD) with the tile state granted. Prefill only: MatmulInt8Amx reads activation
// rows in tiles of 16, so xu must hold rows up to n rounded up to 32 (extra rows: any values,
// e.g. 128) and sx as many; only rows < n are written. Same bits as every other level.
bool HasAmxInt8();
// The int8 and int4 ops' rule: AMX-INT8 tiles run a matmul of at least kAmxIntMinRows activation
// rows (prefill) where the active level is amx and the CPU has AMX-INT8 (integer sums are exact,
// the same bits as VNNI, so choosing by row count keeps batch invariance); the caller then
// allocates AmxPaddedRows(rows) activation rows, as the tiles read them in 16s, two at a time.
inline constexpr int64_t kAmxIntMinRows = 16;
bool UseAmxInt(int64_t rows);
inline int64_t AmxPaddedRows(int64_t rows) { return (rows + 31) / 32 * 32; }
void MatmulInt8Amx(const uint8_t* xu, const float* sx, int64_t n, int64_t k_pad, const int8_t* wq,
                   const float* sw, const int32_t* wsum, int64_t j0, int64_t j1, float* y,
                   int64_t ldy);

void MatmulInt8Scalar(const uint8_t* xu, const float* sx, int64_t n, int64_t k_pad,
                      const int8_t* wq, const float* sw, const int32_t* wsum, int64_t j0,
                      int64_t j1, float* y, int64_t ldy);
void MatmulInt8Vnni(const uint8_t* xu, const float* sx, int64_t n, int64_t k_pad,
                    const int8_t* wq, const float* sw, const int32_t* wsum, int64_t j0,
                    int64_t j1, float* y, int64_t ldy);
void MatmulInt8VnniSide(const uint8_t* xu, const float* sx, int64_t n, int64_t k_pad,
                        const int8_t* wq, const float* sw, const int32_t* wsum, int64_t j0,
                        int64_t j1, float* y, int64_t ldy, SidePrefetch* side);
// AVX2 without VNNI: vpmaddubsw(|w|, sign(xq, w)) pairs are at most 2·128·127 = 32512 in
// magnitude, so the int16 step never saturates (it needs xq ≠ −128, i.e. xu ≥ 1); wsum unused.
void MatmulInt8Avx2(const uint8_t* xu, const float* sx, int64_t n, int64_t k_pad,
                    const int8_t* wq, const float* sw, const int32_t* wsum, int64_t j0,
                    int64_t j1, float* y, int64_t ldy);
// AVX-VNNI: the AVX512_VNNI kernel's arithmetic on ymm halves of each panel.
void MatmulInt8AvxVnni(const uint8_t* xu, const float* sx, int64_t n, int64_t k_pad,
                       const int8_t* wq, const float* sw, const int32_t* wsum, int64_t j0,
                       int64_t j1, float* y, int64_t ldy);

}  // namespace loom::cpu
