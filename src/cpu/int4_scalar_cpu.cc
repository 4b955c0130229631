// Int4 matmul: packing, activation corrections, the scalar reference kernel and ISA dispatch.
#include <cmath>

#include "cpu/int4_cpu.h"
#include "cpu/int8_cpu.h"
#include "tensor/dtype.h"

namespace loom::cpu {

void PackInt4(const int8_t* q, int64_t k_pad, uint8_t* out) {
  for (int64_t c = 0; c < k_pad; c += kInt4Chunk) {
    for (int64_t b = 0; b < kInt4Chunk / 2; ++b) {
      const auto lo = static_cast<uint8_t>(q[c + b] + 8);
      const auto hi = static_cast<uint8_t>(q[c + b + kInt4Chunk / 2] + 8);
      out[c / 2 + b] = static_cast<uint8_t>((lo & 0x0F) | ((hi & 0x0F) << 4));
    }
  }
}

int8_t UnpackInt4(const uint8_t* packed, int64_t i) {
  const int64_t c = i / kInt4Chunk, e = i % kInt4Chunk;
  const uint8_t byte = packed[c * (kInt4Chunk / 2) + e % (kInt4Chunk / 2)];
  const int nibble = e < kInt4Chunk / 2 ? (byte & 0x0F) : (byte >> 4);
  return static_cast<int8_t>(nibble - 8);
}

void Int4Corrections(const int8_t* xq, int64_t n, int64_t k_pad, int32_t* corr) {
  for (int64_t r = 0; r < n; ++r) {
    const int8_t* x = xq + r * k_pad;
    int32_t* c = corr + r * (k_pad / 4);
    for (int64_t i = 0; i < k_pad / 4; ++i) {
      c[i] = -8 * (int32_t{x[4 * i]} + x[4 * i + 1] + x[4 * i + 2] + x[4 * i + 3]);
    }
  }
}

void MatmulInt4Scalar(const int8_t* xq, const int32_t* corr, const float* sx, int64_t n,
                      int64_t k_pad, const uint8_t* wq, const uint16_t* wd, int group, int64_t j0,
                      int64_t j1, float* y, int64_t ldy) {
  const int64_t chunks = k_pad / kInt4Chunk, groups = k_pad / group;
  for (int64_t r = 0; r < n; ++r) {
    const int8_t* x = xq + r * k_pad;
    const int32_t* cr = corr + r * (k_pad / 4);
    for (int64_t j = j0; j < j1; ++j) {
      const uint8_t* w = wq + j * (k_pad / 2);
      const uint16_t* d = wd + j * groups;
      float acc[16] = {};
      for (int64_t c = 0; c < chunks; ++c) {
        int32_t t[2][16];
        for (int h = 0; h < 2; ++h) {
          for (int l = 0; l < 16; ++l) {
            const int64_t e0 = c * kInt4Chunk + 64 * h + 4 * l;
            int32_t s = cr[e0 / 4];
            for (int e = 0; e < 4; ++e) {
              const uint8_t byte = w[c * 64 + 4 * l + e];
              const int u = h == 0 ? (byte & 0x0F) : (byte >> 4);
              s += u * int32_t{x[e0 + e]};
            }
            t[h][l] = s;
          }
        }
        if (group == 128) {
          const float dc = F16ToF32(d[c]);
          for (int l = 0; l < 16; ++l) acc[l] = std::fma(static_cast<float>(t[0][l] + t[1][l]), dc, acc[l]);
        } else {
          for (int h = 0; h < 2; ++h) {
            for (int l = 0; l < 16; ++l) {
              const float dg = F16ToF32(d[c * 4 + 2 * h + (l >= 8 ? 1 : 0)]);
              acc[l] = std::fma(static_cast<float>(t[h][l]), dg, acc[l]);
            }
          }
        }
      }
      y[r * ldy + (j - j0)] = ReduceLanes16(acc) * sx[r];
    }
  }
}

void MatmulInt4(Isa isa, const int8_t* xq, const int32_t* corr, const float* sx, int64_t n,
                int64_t k_pad, const uint8_t* wq, const uint16_t* wd, int group, int64_t j0,
                int64_t j1, float* y, int64_t ldy) {
  if (isa >= Isa::kAvx512 && HasAvx512Vnni()) {
    MatmulInt4Vnni(xq, corr, sx, n, k_pad, wq, wd, group, j0, j1, y, ldy);
  } else {
    MatmulInt4Scalar(xq, corr, sx, n, k_pad, wq, wd, group, j0, j1, y, ldy);
  }
}

}  // namespace loom::cpu
