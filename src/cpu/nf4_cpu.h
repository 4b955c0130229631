// bitsandbytes 4-bit (NF4 NormalFloat4, FP4) matmul kernels over 16-column panels: a 16-entry code
// table, f32 activations, one per-block absmax per column; one function per ISA, all bit-exact.
#pragma once

#include <cstdint>

#include "cpu/cpu_features.h"

namespace loom::cpu {

// bitsandbytes' NF4 code (functional.get_4bit_type("nf4")), f32: index q ↦ kNf4Code[q]. Index 7
// is 0.0 (used for padding).
extern const float kNf4Code[16];
// bitsandbytes' FP4 code as its CPU dequantize_4bit computes it (sign bit 3, then 2 exponent bits
// and 1 mantissa bit, scaled so 0b0011 is 1.0): {0, 1/192, 2/3, 1, 1/3, 1/2, 1/6, 1/4} in f32 and
// their negatives at 8..15 (index 8 is −0.0; get_4bit_type("fp4"), the quant_map, holds +0.0).
// Index 0 is 0.0 (used for padding).
extern const float kFp4Code[16];

// Which 16-entry code a bitsandbytes 4-bit weight indexes.
enum class Bnb4Type { kNf4, kFp4 };
const float* Bnb4Code(Bnb4Type type);       // kNf4Code or kFp4Code
uint8_t Bnb4ZeroIndex(Bnb4Type type);       // the index of +0.0: 7 (nf4), 0 (fp4)
const char* Bnb4TypeName(Bnb4Type type);    // "nf4", "fp4" (bitsandbytes' quant_type)

// Layout. Output columns (weight rows) are stored in panels of 16 (the last panel padded with
// the code's 0.0 index and absmax 0). A panel holds its `k` inputs (k even) as k / 2 chunks of
// 16 bytes: in chunk t, byte c holds column c's input 2t in its low nibble and input 2t + 1 in
// its high nibble (the code index q, 0..15). One 16-byte load widened to 16 lanes gives the
// indices of 16 columns for input 2t (low 4 bits: what vpermps reads) and, shifted by 4, for 2t+1.
// Absmax: per panel [k / block, 16] f32 (block b of column c).
inline constexpr int64_t kNf4Panel = 16;
// The AVX2 and AVX-512 tiles prefetch each panel stream this far ahead, once per 64-byte line,
// at every row count (as the int8/int4 kernels: the lookups keep the core busy enough that the
// hardware prefetcher alone falls behind). 0.5B shape, `--quantize nf4`, 2 threads, Emerald
// Rapids, previous and new binary interleaved (2 rounds), decode batch 1 / 4 / 8 / 16: avx512
// 67-69 (unchanged) / 139-142 → 163-165 / 165-168 → 190-191 / 191-194 → 201; avx2
// (`LOOM_ISA=avx2`) 31.6-32.0 → 40.4-41.6 / 68-69 → 110-111 / 103-104 → 110-111 / 126 → 132.
inline constexpr int64_t kNf4PrefetchAhead = 2048;

// q: [16, k] code indices (0..15), row-major (the panel's 16 columns); out: [8 · k] bytes.
void PackNf4Panel(const uint8_t* q, int64_t k, uint8_t* out);
// Column c's input i (0..15) of a packed panel with k inputs.
uint8_t UnpackNf4(const uint8_t* panel, int64_t c, int64_t i);

// y[r, j − j0] (row stride ldy) for j in [j0, j1), j0 a multiple of 16: x [n, k] f32 (row
// stride k), wq: panels (8 · k bytes each), absmax: per panel [k / block, 16] f32; block divides
// k and is even; code: the 16 f32 values the indices select. Every ISA returns the same bits: per
// block b the sum
// t = fma(code[q], x[i], t) over i in the block in order from t = 0, then acc = fma(t, absmax[j,
// b], acc) in block order from acc = 0; y = acc. A row's result depends only on that row.
void MatmulNf4(Isa isa, const float* x, int64_t n, int64_t k, const uint8_t* wq,
               const float* absmax, int64_t block, const float* code, int64_t j0, int64_t j1,
               float* y, int64_t ldy);

void MatmulNf4Scalar(const float* x, int64_t n, int64_t k, const uint8_t* wq, const float* absmax,
                     int64_t block, const float* code, int64_t j0, int64_t j1, float* y,
                     int64_t ldy);
void MatmulNf4Avx2(const float* x, int64_t n, int64_t k, const uint8_t* wq, const float* absmax,
                   int64_t block, const float* code, int64_t j0, int64_t j1, float* y,
                   int64_t ldy);
void MatmulNf4Avx512(const float* x, int64_t n, int64_t k, const uint8_t* wq, const float* absmax,
                     int64_t block, const float* code, int64_t j0, int64_t j1, float* y,
                     int64_t ldy);

}  // namespace loom::cpu
