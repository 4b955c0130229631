// Int8 matmul: activation quantization, panel packing, the scalar reference kernel and ISA dispatch.
#include <algorithm>
#include <cmath>

#include "cpu/int8_cpu.h"

namespace loom::cpu {

bool HasAvx512Vnni() {
#if defined(__x86_64__)
  static const bool has = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512vnni") != 0;
  }();
  return has;
#else
  return false;
#endif
}

void PackInt8Panel(const int8_t* q, int64_t k_pad, int8_t* out) {
  for (int64_t t = 0; t < k_pad / 4; ++t) {
    for (int64_t c = 0; c < kInt8Panel; ++c) {
      for (int64_t e = 0; e < 4; ++e) out[t * 64 + 4 * c + e] = q[c * k_pad + 4 * t + e];
    }
  }
}

void MatmulInt8Scalar(const uint8_t* xu, const float* sx, int64_t n, int64_t k_pad,
                      const int8_t* wq, const float* sw, const int32_t* wsum, int64_t j0,
                      int64_t j1, float* y, int64_t ldy) {
  (void)wsum;
  for (int64_t r = 0; r < n; ++r) {
    const uint8_t* x = xu + r * k_pad;
    for (int64_t j = j0; j < j1; ++j) {
      const int8_t* panel = wq + (j / kInt8Panel) * kInt8Panel * k_pad;
      const int64_t c = j % kInt8Panel;
      int32_t acc = 0;
      for (int64_t i = 0; i < k_pad; ++i) {
        acc += (int32_t{x[i]} - 128) * int32_t{panel[(i / 4) * 64 + 4 * c + i % 4]};
      }
      y[r * ldy + (j - j0)] = static_cast<float>(acc) * (sx[r] * sw[j]);
    }
  }
}

namespace {
void MatmulInt8Chunk(Isa isa, const uint8_t* xu, const float* sx, int64_t n, int64_t k_pad,
                     const int8_t* wq, const float* sw, const int32_t* wsum, int64_t j0,
                     int64_t j1, float* y, int64_t ldy, SidePrefetch* side) {
  switch (IntKernelFor(isa)) {
    case IntKernel::kAvx512Vnni:
      return MatmulInt8VnniSide(xu, sx, n, k_pad, wq, sw, wsum, j0, j1, y, ldy, side);
    case IntKernel::kAvxVnni: return MatmulInt8AvxVnni(xu, sx, n, k_pad, wq, sw, wsum, j0, j1, y, ldy);
    case IntKernel::kAvx2: return MatmulInt8Avx2(xu, sx, n, k_pad, wq, sw, wsum, j0, j1, y, ldy);
    case IntKernel::kScalar: break;
  }
  MatmulInt8Scalar(xu, sx, n, k_pad, wq, sw, wsum, j0, j1, y, ldy);
}
}  // namespace

void MatmulInt8(Isa isa, const uint8_t* xu, const float* sx, int64_t n, int64_t k_pad,
                const int8_t* wq, const float* sw, const int32_t* wsum, int64_t j0, int64_t j1,
                float* y, int64_t ldy, SidePrefetch* side) {
  ForEachIntChunk(n, j0, j1, [&](int64_t c0, int64_t c1) {
    MatmulInt8Chunk(isa, xu, sx, n, k_pad, wq, sw, wsum, c0, c1, y + (c0 - j0), ldy, side);
  });
}

}  // namespace loom::cpu
