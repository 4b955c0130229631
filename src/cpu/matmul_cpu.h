// CPU matmul kernels y[n, j0:j1] = x[n, k] · W[j0:j1, k]ᵀ, one function per ISA level.
#pragma once

#include <cstdint>

#include "cpu/cpu_features.h"
#include "tensor/dtype.h"

namespace loom::cpu {

// Exact path: f32 activations, weights in their file dtype converted in registers,
// f32 accumulation. x: [n, k] f32 (row stride k); w: [m, k] of `wtype` (row stride k);
// y: [n, ldy] f32, columns j0..j1 written (overwritten, not accumulated).
void MatmulF32(Isa isa, DType wtype, const float* x, int64_t n, int64_t k, const void* w,
               int64_t j0, int64_t j1, float* y, int64_t ldy);

// bf16-weight path with the AVX512_BF16 dot-product instruction (f32 accumulation). xb:
// [n, k] activations rounded to bf16; x_lo (nullable): [n, k] bf16 residuals x − xb, whose
// second dot product restores ~16 mantissa bits of x (error ~2⁻¹⁷ relative instead of 2⁻⁹).
void MatmulBf16(Isa isa, const uint16_t* xb, const uint16_t* x_lo, int64_t n, int64_t k,
                const uint16_t* w, int64_t j0, int64_t j1, float* y, int64_t ldy);

// Activations x [count] rounded to bf16 (round to nearest even, as F32ToBf16) into hi, and when
// lo is non-null the residuals x − hi rounded again into lo (the exact split).
void RoundToBf16(Isa isa, const float* x, int64_t count, uint16_t* hi, uint16_t* lo);

// AMX-BF16 (Intel Sapphire Rapids and later): true when the CPU has AMX and the kernel granted
// this process the tile state.
bool AmxAvailable();
// Activations x [n, k] (k a multiple of 32) packed into 16-row B tiles as bf16 (hi, then lo
// residuals when split); size in uint16 elements.
size_t PackedActivationsAmxSize(int64_t n, int64_t k, bool split);
void PackActivationsAmx(const float* x, int64_t n, int64_t k, bool split, uint16_t* out);
// The same for the 16-row groups [g0, g1) only (what they write does not overlap).
void PackActivationsAmxGroups(const float* x, int64_t n, int64_t k, bool split, uint16_t* out,
                              int64_t g0, int64_t g1);
// y[n, j0:j1] = x · W[j0:j1]ᵀ from packed activations and row-major bf16 weights.
void MatmulBf16Amx(const uint16_t* packed_x, bool split, int64_t n, int64_t k, const uint16_t* w,
                   int64_t j0, int64_t j1, float* y, int64_t ldy);
// Weights W [m, k] (k a multiple of 32) as AMX A tiles: panel p (rows 16p..16p+15, zero past m)
// is k / 32 tiles of 16 rows × 32 bf16, each 1 KiB contiguous, one after the other. A tile load
// then reads one 1 KiB run instead of 16 rows' 64-byte pieces k·2 bytes apart. Size in uint16.
size_t AmxPackedWeightSize(int64_t m, int64_t k);
// Writes panels [p0, p1) of `out` (each panel's bytes only: callers may split the panels).
void PackWeightAmx(const uint16_t* w, int64_t m, int64_t k, int64_t p0, int64_t p1, uint16_t* out);
// MatmulBf16Amx on weights packed by PackWeightAmx (j0 a multiple of 16): the same bits.
void MatmulBf16AmxPacked(const uint16_t* packed_x, bool split, int64_t n, int64_t k,
                         const uint16_t* w_packed, int64_t j0, int64_t j1, float* y, int64_t ldy);
// y[r, j] = SiLU(x[r]·gate[j]) · (x[r]·up[j]) for columns [j0, j1) (multiples of 16; m a
// multiple of 16), gate and up [m, k] packed by PackWeightAmx, x packed by PackActivationsAmx:
// each gate and up value has the bits MatmulBf16AmxPacked gives it, and SiluMul16 (what
// SiluMulAvx512 applies) combines them, so y has the bits of the two matmuls then SiluMul.
// gate and up are never written out: one [n, m] store instead of three, and one pass.
void MatmulBf16AmxPackedSiluMul(const uint16_t* packed_x, bool split, int64_t n, int64_t k,
                                const uint16_t* gate, const uint16_t* up, int64_t j0, int64_t j1,
                                float* y, int64_t ldy);
// y[j0:j1] = x · W[j0:j1]ᵀ for one row x [k] (k a multiple of 32), unpacked: bit for bit what
// MatmulBf16Amx gives that row in any packed group (the decode shape of the LoRA shrink).
void MatmulBf16AmxRow(const float* x, bool split, int64_t k, const uint16_t* w, int64_t j0,
                      int64_t j1, float* y);

// Per-ISA implementations (scalar is the reference in tests).
void MatmulF32Scalar(DType wtype, const float* x, int64_t n, int64_t k, const void* w, int64_t j0,
                     int64_t j1, float* y, int64_t ldy);
void MatmulBf16Scalar(const uint16_t* xb, const uint16_t* x_lo, int64_t n, int64_t k, const uint16_t* w, int64_t j0,
                      int64_t j1, float* y, int64_t ldy);
void MatmulF32Avx2(DType wtype, const float* x, int64_t n, int64_t k, const void* w, int64_t j0,
                   int64_t j1, float* y, int64_t ldy);
void MatmulF32Avx512(DType wtype, const float* x, int64_t n, int64_t k, const void* w, int64_t j0,
                     int64_t j1, float* y, int64_t ldy);
void MatmulBf16Avx512(const uint16_t* xb, const uint16_t* x_lo, int64_t n, int64_t k, const uint16_t* w, int64_t j0,
                      int64_t j1, float* y, int64_t ldy);
void RoundToBf16Avx512(const float* x, int64_t count, uint16_t* hi, uint16_t* lo);

}  // namespace loom::cpu
