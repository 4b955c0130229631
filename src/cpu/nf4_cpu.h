// NF4 (bitsandbytes NormalFloat4) matmul kernels over 16-column panels: a 16-entry code table, f32
// activations, one per-block absmax per column; one function per ISA, all bit-exact.
#pragma once

#include <cstdint>

#include "cpu/cpu_features.h"

namespace loom::cpu {

// bitsandbytes' NF4 code (functional.get_4bit_type("nf4")), f32: index q ↦ kNf4Code[q]. Index 7
// is 0.0 (used for padding).
extern const float kNf4Code[16];

// Layout. Output columns (weight rows) are stored in panels of 16 (the last panel padded with
// q = 7, the code's 0.0, and absmax 0). A panel holds its `k` inputs (k even) as k / 2 chunks of
// 16 bytes: in chunk t, byte c holds column c's input 2t in its low nibble and input 2t + 1 in
// its high nibble (the code index q, 0..15). One 16-byte load widened to 16 lanes gives the
// indices of 16 columns for input 2t (low 4 bits: what vpermps reads) and, shifted by 4, for 2t+1.
// Absmax: per panel [k / block, 16] f32 (block b of column c).
inline constexpr int64_t kNf4Panel = 16;

// q: [16, k] code indices (0..15), row-major (the panel's 16 columns); out: [8 · k] bytes.
void PackNf4Panel(const uint8_t* q, int64_t k, uint8_t* out);
// Column c's input i (0..15) of a packed panel with k inputs.
uint8_t UnpackNf4(const uint8_t* panel, int64_t c, int64_t i);

// y[r, j − j0] (row stride ldy) for j in [j0, j1), j0 a multiple of 16: x [n, k] f32 (row
// stride k), wq: panels (8 · k bytes each), absmax: per panel [k / block, 16] f32; block divides
// k and is even. Every ISA returns the same bits: per block b the sum
// t = fma(code[q], x[i], t) over i in the block in order from t = 0, then acc = fma(t, absmax[j,
// b], acc) in block order from acc = 0; y = acc. A row's result depends only on that row.
void MatmulNf4(Isa isa, const float* x, int64_t n, int64_t k, const uint8_t* wq,
               const float* absmax, int64_t block, int64_t j0, int64_t j1, float* y, int64_t ldy);

void MatmulNf4Scalar(const float* x, int64_t n, int64_t k, const uint8_t* wq, const float* absmax,
                     int64_t block, int64_t j0, int64_t j1, float* y, int64_t ldy);
void MatmulNf4Avx2(const float* x, int64_t n, int64_t k, const uint8_t* wq, const float* absmax,
                   int64_t block, int64_t j0, int64_t j1, float* y, int64_t ldy);
void MatmulNf4Avx512(const float* x, int64_t n, int64_t k, const uint8_t* wq, const float* absmax,
                     int64_t block, int64_t j0, int64_t j1, float* y, int64_t ldy);

}  // namespace loom::cpu
