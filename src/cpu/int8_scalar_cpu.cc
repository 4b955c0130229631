// Int8 matmul: activation quantization and the scalar reference kernel; ISA dispatch.
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

void QuantizeRowsInt8(const float* x, int64_t n, int64_t k, int8_t* xq, float* sx) {
  for (int64_t r = 0; r < n; ++r) {
    const float* xr = x + r * k;
    float amax = 0;
    for (int64_t i = 0; i < k; ++i) amax = std::max(amax, std::fabs(xr[i]));
    int8_t* q = xq + r * k;
    if (!(amax > 0) || !std::isfinite(amax)) {  // zero row (or a NaN the sampler reports)
      std::fill(q, q + k, int8_t{0});
      sx[r] = amax > 0 ? amax : 0.0f;
      continue;
    }
    sx[r] = amax / 127.0f;
    const float inv = 127.0f / amax;
    for (int64_t i = 0; i < k; ++i) {
      const float v = std::nearbyint(xr[i] * inv);
      q[i] = static_cast<int8_t>(std::clamp(v, -127.0f, 127.0f));
    }
  }
}

void MatmulInt8Scalar(const int8_t* xq, const float* sx, int64_t n, int64_t k, const int8_t* wq,
                      const float* sw, int64_t j0, int64_t j1, float* y, int64_t ldy) {
  for (int64_t r = 0; r < n; ++r) {
    const int8_t* xr = xq + r * k;
    for (int64_t j = j0; j < j1; ++j) {
      const int8_t* wr = wq + j * k;
      int32_t acc = 0;
      for (int64_t i = 0; i < k; ++i) acc += int32_t{xr[i]} * int32_t{wr[i]};
      y[r * ldy + (j - j0)] = static_cast<float>(acc) * (sx[r] * sw[j]);
    }
  }
}

void MatmulInt8(Isa isa, const int8_t* xq, const float* sx, int64_t n, int64_t k,
                const int8_t* wq, const float* sw, const int32_t* wsum, int64_t j0, int64_t j1,
                float* y, int64_t ldy) {
  if (isa >= Isa::kAvx512 && HasAvx512Vnni()) {
    MatmulInt8Vnni(xq, sx, n, k, wq, sw, wsum, j0, j1, y, ldy);
  } else {
    MatmulInt8Scalar(xq, sx, n, k, wq, sw, j0, j1, y, ldy);
  }
}

}  // namespace loom::cpu
