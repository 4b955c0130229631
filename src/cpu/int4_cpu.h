// Int4 (W4A8) group-wise matmul kernels over 16-column panels: exact int32 sums per group, one f32 fma per group, one function per ISA.
#pragma once

#include <cstdint>

#include "cpu/cpu_features.h"
#include "cpu/side_prefetch.h"

namespace loom::cpu {

// Layout. Output columns (weight rows) are stored in panels of 16, inputs padded with q = 0 to
// k_pad, a multiple of kInt4Chunk (padded activations are 0, so padding adds nothing). A panel
// is k_pad / 8 blocks of 64 bytes; in block t, byte 4c + e holds column c's input 8t + e in its
// low nibble and input 8t + 4 + e in its high nibble, each as q + 8 (q in −8..7). So one 64-byte
// load, an `and` and a shift give two vectors of 16 columns × 4 inputs: the operand layout of
// vpdpbusd with 4 broadcast activations (and of an AMX-INT8 B tile).
inline constexpr int64_t kInt4Chunk = 128;
inline constexpr int64_t kInt4Panel = 16;
// Unpacking the nibbles keeps the core busy enough that the hardware prefetcher alone falls
// behind the weight stream, at any row count below the AMX-INT8 threshold: each kernel's tile
// prefetches every panel's stream this many bytes ahead. 0.5B shape, int4 g128 + head, 2
// threads, Emerald Rapids: decode batch 1, avx512vnni 91-92 → 100-104 tok/s, avx-vnni 78-80 →
// 90-94, avx2 72-74 → 99-103 (512 and 4096 bytes ahead were no better). Then also for the
// multi-row tiles (the first 4-row group reads each panel from DRAM, later groups from L2):
// `loom bench --batch 4 8 16`, old and new binary interleaved, 2 rounds, batch 4 / 8 / 16
// (batch 1 unchanged): avx512vnni 237-244 → 262-279 / 298-304 → 338-348 / unchanged (AMX-INT8
// from 16 rows), avx-vnni (`LOOM_ISA=avx2`) 151 → 205-209 / 207 → 283-285 / 268-270 → 344-348,
// avx2 (`LOOM_AVXVNNI=0`) 129-131 → 194-195 / 169-170 → 243 / 213 → 270-272.
inline constexpr int64_t kInt4PrefetchAhead = 2048;

// q: [16, k_pad] values in −8..7, row-major (the panel's 16 columns); out: [16 · k_pad / 2].
void PackInt4Panel(const int8_t* q, int64_t k_pad, uint8_t* out);
// Column c's input i (−8..7) of a packed panel.
int8_t UnpackInt4(const uint8_t* panel, int64_t c, int64_t i);

// The nibble offset's correction per activation row and group: corr[r, g] = −8·Σ_{i∈g} xq[r, i].
// xq: [n, k_pad]; corr: [n, k_pad / group].
void Int4Corrections(const int8_t* xq, int64_t n, int64_t k_pad, int group, int32_t* corr);

// A kernel's instantiation for group 32, 64 or 128, nullptr for any other group (the caller then
// runs the scalar reference, which takes any group).
template <typename Fn>
Fn PickInt4Group(int group, Fn g32, Fn g64, Fn g128) {
  return group == 128 ? g128 : group == 64 ? g64 : group == 32 ? g32 : nullptr;
}

// y[r, j − j0] (row stride ldy) for j in [j0, j1), j0 a multiple of 16, group ∈ {32, 64, 128}:
//   xq [n, k_pad] int8 activations, sx [n] their row scales, corr [n, k_pad / group];
//   wq: panels (16 · k_pad / 2 bytes each); wd: per panel [k_pad / group, 16] f16 scales.
// Every ISA returns the same bits: per group g the exact int32 t = corr[r, g] + Σ_{i∈g} (q + 8)·x
// is accumulated as acc = fma(float(t), d[j, g], acc) in group order; y = acc · sx[r].
// `side`, if given: bytes the caller reads after the call (SidePrefetch), issued a line per step
// of the AVX512_VNNI kernel's loop, and of the AVX2 kernel's at more than one row (the other
// levels leave them to the hardware).
void MatmulInt4(Isa isa, const int8_t* xq, const float* sx, const int32_t* corr, int64_t n,
                int64_t k_pad, const uint8_t* wq, const uint16_t* wd, int group, int64_t j0,
                int64_t j1, float* y, int64_t ldy, SidePrefetch* side = nullptr);

void MatmulInt4Scalar(const int8_t* xq, const float* sx, const int32_t* corr, int64_t n,
                      int64_t k_pad, const uint8_t* wq, const uint16_t* wd, int group, int64_t j0,
                      int64_t j1, float* y, int64_t ldy);
void MatmulInt4Vnni(const int8_t* xq, const float* sx, const int32_t* corr, int64_t n,
                    int64_t k_pad, const uint8_t* wq, const uint16_t* wd, int group, int64_t j0,
                    int64_t j1, float* y, int64_t ldy);
void MatmulInt4VnniSide(const int8_t* xq, const float* sx, const int32_t* corr, int64_t n,
                        int64_t k_pad, const uint8_t* wq, const uint16_t* wd, int group,
                        int64_t j0, int64_t j1, float* y, int64_t ldy, SidePrefetch* side);
// AVX2 without VNNI: vpmaddubsw(q + 8, x) pairs are at most 2·15·128 = 3840 in magnitude, the
// two nibbles' pairs of 4 blocks summed in int16 at most 8·3840 = 30720 < 2¹⁵; then vpmaddwd
// into int32.
void MatmulInt4Avx2(const int8_t* xq, const float* sx, const int32_t* corr, int64_t n,
                    int64_t k_pad, const uint8_t* wq, const uint16_t* wd, int group, int64_t j0,
                    int64_t j1, float* y, int64_t ldy);
void MatmulInt4Avx2Side(const int8_t* xq, const float* sx, const int32_t* corr, int64_t n,
                        int64_t k_pad, const uint8_t* wq, const uint16_t* wd, int group,
                        int64_t j0, int64_t j1, float* y, int64_t ldy, SidePrefetch* side);
// AVX-VNNI: the AVX512_VNNI kernel's arithmetic on ymm halves of each panel.
void MatmulInt4AvxVnni(const int8_t* xq, const float* sx, const int32_t* corr, int64_t n,
                       int64_t k_pad, const uint8_t* wq, const uint16_t* wd, int group,
                       int64_t j0, int64_t j1, float* y, int64_t ldy);

// AMX-INT8 (TDPBSUD, where HasAmxInt8(); prefill): group 64 or 128 (Int4AmxGroup; a tile step
// is 64 inputs, which would straddle two groups of 32), else the scalar reference. Reads
// activation rows in tiles of 16, so xq must hold rows up to n rounded up to 32 (extra rows:
// any values) — corr and sx only n; only rows < n are written. Same bits as every other level.
bool Int4AmxGroup(int group);
void MatmulInt4Amx(const int8_t* xq, const float* sx, const int32_t* corr, int64_t n, int64_t k_pad,
                   const uint8_t* wq, const uint16_t* wd, int group, int64_t j0, int64_t j1,
                   float* y, int64_t ldy);
// The same tiles for MatmulInt4Zp (below): sums [n, k_pad / group], wz the zero points.
void MatmulInt4ZpAmx(const int8_t* xq, const float* sx, const int32_t* sums, int64_t n,
                     int64_t k_pad, const uint8_t* wq, const uint16_t* wd, const uint8_t* wz,
                     int group, int64_t j0, int64_t j1, float* y, int64_t ldy);

// Asymmetric weights with per-group zero points (GPTQ, AWQ): W[j, i] = d[j, g]·(u − z[j, g]),
// u the stored nibble (0..15, the panel's q + 8) and z in 0..16. Group 32, 64 or 128.
// sums[r, g] = Σ_{i∈g} xq[r, i]; xq: [n, k_pad]; sums: [n, k_pad / group].
void Int4GroupSums(const int8_t* xq, int64_t n, int64_t k_pad, int group, int32_t* sums);
// As MatmulInt4 with wz: per panel [k_pad / group, 16] zero points (uint8), and per group the
// exact int32 t = Σ_{i∈g} u·x − z[j, g]·sums[r, g] (|t| ≤ 128·15·128 + 16·128·128 < 2³¹);
// acc = fma(float(t), d[j, g], acc) in group order; y = acc · sx[r]. Same bits at every ISA.
void MatmulInt4Zp(Isa isa, const int8_t* xq, const float* sx, const int32_t* sums, int64_t n,
                  int64_t k_pad, const uint8_t* wq, const uint16_t* wd, const uint8_t* wz,
                  int group, int64_t j0, int64_t j1, float* y, int64_t ldy);
void MatmulInt4ZpScalar(const int8_t* xq, const float* sx, const int32_t* sums, int64_t n,
                        int64_t k_pad, const uint8_t* wq, const uint16_t* wd, const uint8_t* wz,
                        int group, int64_t j0, int64_t j1, float* y, int64_t ldy);
void MatmulInt4ZpVnni(const int8_t* xq, const float* sx, const int32_t* sums, int64_t n,
                      int64_t k_pad, const uint8_t* wq, const uint16_t* wd, const uint8_t* wz,
                      int group, int64_t j0, int64_t j1, float* y, int64_t ldy);
// AVX2 (also what AVX-VNNI CPUs run for zero points): the symmetric AVX2 kernel with each group's
// sum started at −z·Σx per column.
void MatmulInt4ZpAvx2(const int8_t* xq, const float* sx, const int32_t* sums, int64_t n,
                      int64_t k_pad, const uint8_t* wq, const uint16_t* wd, const uint8_t* wz,
                      int group, int64_t j0, int64_t j1, float* y, int64_t ldy);

}  // namespace loom::cpu
