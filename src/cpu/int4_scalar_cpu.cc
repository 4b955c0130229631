// Int4 matmul: panel packing, activation corrections, the scalar reference kernel and ISA dispatch.
#include <cmath>

#include "cpu/int4_cpu.h"
#include "cpu/int8_cpu.h"
#include "tensor/dtype.h"

namespace loom::cpu {

void PackInt4Panel(const int8_t* q, int64_t k_pad, uint8_t* out) {
  for (int64_t t = 0; t < k_pad / 8; ++t) {
    for (int64_t c = 0; c < kInt4Panel; ++c) {
      for (int64_t e = 0; e < 4; ++e) {
        const auto lo = static_cast<uint8_t>(q[c * k_pad + 8 * t + e] + 8);
        const auto hi = static_cast<uint8_t>(q[c * k_pad + 8 * t + 4 + e] + 8);
        out[t * 64 + 4 * c + e] = static_cast<uint8_t>((lo & 0x0F) | ((hi & 0x0F) << 4));
      }
    }
  }
}

int8_t UnpackInt4(const uint8_t* panel, int64_t c, int64_t i) {
  const int64_t t = i / 8, e = i % 8;
  const uint8_t byte = panel[t * 64 + 4 * c + e % 4];
  return static_cast<int8_t>((e < 4 ? (byte & 0x0F) : (byte >> 4)) - 8);
}

void Int4Corrections(const int8_t* xq, int64_t n, int64_t k_pad, int group, int32_t* corr) {
  const int64_t groups = k_pad / group;
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t g = 0; g < groups; ++g) {
      int32_t s = 0;
      for (int64_t i = g * group; i < (g + 1) * group; ++i) s += xq[r * k_pad + i];
      corr[r * groups + g] = -8 * s;
    }
  }
}

void MatmulInt4Scalar(const int8_t* xq, const float* sx, const int32_t* corr, int64_t n,
                      int64_t k_pad, const uint8_t* wq, const uint16_t* wd, int group, int64_t j0,
                      int64_t j1, float* y, int64_t ldy) {
  const int64_t groups = k_pad / group;
  for (int64_t r = 0; r < n; ++r) {
    const int8_t* x = xq + r * k_pad;
    for (int64_t j = j0; j < j1; ++j) {
      const int64_t p = j / kInt4Panel, c = j % kInt4Panel;
      const uint8_t* panel = wq + p * kInt4Panel * k_pad / 2;
      const uint16_t* d = wd + p * groups * kInt4Panel;
      float acc = 0;
      for (int64_t g = 0; g < groups; ++g) {
        int32_t t = corr[r * groups + g];
        for (int64_t i = g * group; i < (g + 1) * group; ++i) {
          t += (UnpackInt4(panel, c, i) + 8) * int32_t{x[i]};
        }
        acc = std::fma(static_cast<float>(t), F16ToF32(d[g * kInt4Panel + c]), acc);
      }
      y[r * ldy + (j - j0)] = acc * sx[r];
    }
  }
}

void Int4GroupSums(const int8_t* xq, int64_t n, int64_t k_pad, int group, int32_t* sums) {
  const int64_t groups = k_pad / group;
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t g = 0; g < groups; ++g) {
      int32_t s = 0;
      for (int64_t i = g * group; i < (g + 1) * group; ++i) s += xq[r * k_pad + i];
      sums[r * groups + g] = s;
    }
  }
}

void MatmulInt4ZpScalar(const int8_t* xq, const float* sx, const int32_t* sums, int64_t n,
                        int64_t k_pad, const uint8_t* wq, const uint16_t* wd, const uint8_t* wz,
                        int group, int64_t j0, int64_t j1, float* y, int64_t ldy) {
  const int64_t groups = k_pad / group;
  for (int64_t r = 0; r < n; ++r) {
    const int8_t* x = xq + r * k_pad;
    for (int64_t j = j0; j < j1; ++j) {
      const int64_t p = j / kInt4Panel, c = j % kInt4Panel;
      const uint8_t* panel = wq + p * kInt4Panel * k_pad / 2;
      const uint16_t* d = wd + p * groups * kInt4Panel;
      const uint8_t* z = wz + p * groups * kInt4Panel;
      float acc = 0;
      for (int64_t g = 0; g < groups; ++g) {
        int32_t t = -int32_t{z[g * kInt4Panel + c]} * sums[r * groups + g];
        for (int64_t i = g * group; i < (g + 1) * group; ++i) {
          t += (UnpackInt4(panel, c, i) + 8) * int32_t{x[i]};
        }
        acc = std::fma(static_cast<float>(t), F16ToF32(d[g * kInt4Panel + c]), acc);
      }
      y[r * ldy + (j - j0)] = acc * sx[r];
    }
  }
}

namespace {
void MatmulInt4ZpChunk(Isa isa, const int8_t* xq, const float* sx, const int32_t* sums, int64_t n,
                       int64_t k_pad, const uint8_t* wq, const uint16_t* wd, const uint8_t* wz,
                       int group, int64_t j0, int64_t j1, float* y, int64_t ldy) {
  switch (IntKernelFor(isa)) {
    case IntKernel::kAvx512Vnni:
      return MatmulInt4ZpVnni(xq, sx, sums, n, k_pad, wq, wd, wz, group, j0, j1, y, ldy);
    case IntKernel::kAvxVnni:  // no AVX-VNNI zero-point kernel: the AVX2 one
    case IntKernel::kAvx2:
      return MatmulInt4ZpAvx2(xq, sx, sums, n, k_pad, wq, wd, wz, group, j0, j1, y, ldy);
    case IntKernel::kScalar: break;
  }
  MatmulInt4ZpScalar(xq, sx, sums, n, k_pad, wq, wd, wz, group, j0, j1, y, ldy);
}
}  // namespace

void MatmulInt4Zp(Isa isa, const int8_t* xq, const float* sx, const int32_t* sums, int64_t n,
                  int64_t k_pad, const uint8_t* wq, const uint16_t* wd, const uint8_t* wz,
                  int group, int64_t j0, int64_t j1, float* y, int64_t ldy) {
  ForEachIntChunk(n, j0, j1, [&](int64_t c0, int64_t c1) {
    MatmulInt4ZpChunk(isa, xq, sx, sums, n, k_pad, wq, wd, wz, group, c0, c1, y + (c0 - j0), ldy);
  });
}

namespace {
void MatmulInt4Chunk(Isa isa, const int8_t* xq, const float* sx, const int32_t* corr, int64_t n,
                     int64_t k_pad, const uint8_t* wq, const uint16_t* wd, int group, int64_t j0,
                     int64_t j1, float* y, int64_t ldy, SidePrefetch* side) {
  switch (IntKernelFor(isa)) {
    case IntKernel::kAvx512Vnni:
      return MatmulInt4VnniSide(xq, sx, corr, n, k_pad, wq, wd, group, j0, j1, y, ldy, side);
    case IntKernel::kAvxVnni:
      return MatmulInt4AvxVnni(xq, sx, corr, n, k_pad, wq, wd, group, j0, j1, y, ldy);
    case IntKernel::kAvx2:
      return MatmulInt4Avx2Side(xq, sx, corr, n, k_pad, wq, wd, group, j0, j1, y, ldy, side);
    case IntKernel::kScalar: break;
  }
  MatmulInt4Scalar(xq, sx, corr, n, k_pad, wq, wd, group, j0, j1, y, ldy);
}
}  // namespace

void MatmulInt4(Isa isa, const int8_t* xq, const float* sx, const int32_t* corr, int64_t n,
                int64_t k_pad, const uint8_t* wq, const uint16_t* wd, int group, int64_t j0,
                int64_t j1, float* y, int64_t ldy, SidePrefetch* side) {
  ForEachIntChunk(n, j0, j1, [&](int64_t c0, int64_t c1) {
    MatmulInt4Chunk(isa, xq, sx, corr, n, k_pad, wq, wd, group, c0, c1, y + (c0 - j0), ldy, side);
  });
}

}  // namespace loom::cpu
