// Scalar matmul kernels: the plain-loop references every SIMD kernel is tested against.
#include "cpu/matmul_cpu.h"

namespace loom::cpu {

namespace {
inline float LoadW(DType t, const void* w, int64_t i) {
  switch (t) {
    case DType::kF32: return static_cast<const float*>(w)[i];
    case DType::kF16: return F16ToF32(static_cast<const uint16_t*>(w)[i]);
    case DType::kBF16: return Bf16ToF32(static_cast<const uint16_t*>(w)[i]);
  }
  return 0;
}
}  // namespace

void MatmulF32Scalar(DType wtype, const float* x, int64_t n, int64_t k, const void* w, int64_t j0,
                     int64_t j1, float* y, int64_t ldy) {
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = j0; j < j1; ++j) {
      float acc = 0;
      for (int64_t p = 0; p < k; ++p) acc += x[i * k + p] * LoadW(wtype, w, j * k + p);
      y[i * ldy + j] = acc;
    }
  }
}

void MatmulBf16Scalar(const uint16_t* xb, const uint16_t* x_lo, int64_t n, int64_t k,
                      const uint16_t* w, int64_t j0, int64_t j1, float* y, int64_t ldy) {
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = j0; j < j1; ++j) {
      float acc = 0;
      for (int64_t p = 0; p < k; ++p) {
        const float wv = Bf16ToF32(w[j * k + p]);
        acc += Bf16ToF32(xb[i * k + p]) * wv;
        if (x_lo) acc += Bf16ToF32(x_lo[i * k + p]) * wv;
      }
      y[i * ldy + j] = acc;
    }
  }
}

void MatmulF32(Isa isa, DType wtype, const float* x, int64_t n, int64_t k, const void* w,
               int64_t j0, int64_t j1, float* y, int64_t ldy) {
  switch (isa) {
    case Isa::kAmx:
    case Isa::kAvx512Bf16:
    case Isa::kAvx512: return MatmulF32Avx512(wtype, x, n, k, w, j0, j1, y, ldy);
    case Isa::kAvx2: return MatmulF32Avx2(wtype, x, n, k, w, j0, j1, y, ldy);
    case Isa::kScalar: return MatmulF32Scalar(wtype, x, n, k, w, j0, j1, y, ldy);
  }
}

void MatmulBf16(Isa isa, const uint16_t* xb, const uint16_t* x_lo, int64_t n, int64_t k,
                const uint16_t* w, int64_t j0, int64_t j1, float* y, int64_t ldy) {
  switch (isa) {
    case Isa::kAmx:
    case Isa::kAvx512Bf16: return MatmulBf16Avx512(xb, x_lo, n, k, w, j0, j1, y, ldy);
    case Isa::kAvx512:  // no dot product: the scalar reference (Matmul never routes here)
    case Isa::kAvx2:
    case Isa::kScalar: return MatmulBf16Scalar(xb, x_lo, n, k, w, j0, j1, y, ldy);
  }
}

void RoundToBf16(Isa isa, const float* x, int64_t count, uint16_t* hi, uint16_t* lo) {
  if (isa >= Isa::kAvx512Bf16) return RoundToBf16Avx512(x, count, hi, lo);
  for (int64_t i = 0; i < count; ++i) {
    hi[i] = F32ToBf16(x[i]);
    if (lo) lo[i] = F32ToBf16(x[i] - Bf16ToF32(hi[i]));
  }
}

}  // namespace loom::cpu
