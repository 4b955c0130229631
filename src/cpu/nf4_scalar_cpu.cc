// bitsandbytes 4-bit matmul: the NF4 and FP4 code tables, panel packing, the scalar reference
// kernel and ISA dispatch.
#include <cmath>

#include "cpu/int8_cpu.h"
#include "cpu/nf4_cpu.h"

namespace loom::cpu {

// The exact f32 values bitsandbytes stores as weight.quant_map for nf4.
const float kNf4Code[16] = {
    -1.0f,
    -0.6961928009986877f,
    -0.5250730514526367f,
    -0.39491748809814453f,
    -0.28444138169288635f,
    -0.18477343022823334f,
    -0.09105003625154495f,
    0.0f,
    0.07958029955625534f,
    0.16093020141124725f,
    0.24611230194568634f,
    0.33791524171829224f,
    0.44070982933044434f,
    0.5626170039176941f,
    0.7229568362236023f,
    1.0f,
};

// What bitsandbytes' CPU dequantize_4bit returns for each fp4 index with absmax 1 (checked bit for
// bit by tests/golden/nf4_golden_test.cc through the fixtures' dequantized projections).
const float kFp4Code[16] = {
    0.0f,  0.0052083334885537624f,  0.6666666865348816f,  1.0f,
    0.3333333432674408f,  0.5f,  0.1666666716337204f,  0.25f,
    -0.0f, -0.0052083334885537624f, -0.6666666865348816f, -1.0f,
    -0.3333333432674408f, -0.5f, -0.1666666716337204f, -0.25f,
};

const float* Bnb4Code(Bnb4Type type) { return type == Bnb4Type::kFp4 ? kFp4Code : kNf4Code; }
uint8_t Bnb4ZeroIndex(Bnb4Type type) { return type == Bnb4Type::kFp4 ? 0 : 7; }
const char* Bnb4TypeName(Bnb4Type type) { return type == Bnb4Type::kFp4 ? "fp4" : "nf4"; }

void PackNf4Panel(const uint8_t* q, int64_t k, uint8_t* out) {
  for (int64_t t = 0; t < k / 2; ++t) {
    for (int64_t c = 0; c < kNf4Panel; ++c) {
      const uint8_t lo = q[c * k + 2 * t] & 0x0F;
      const uint8_t hi = q[c * k + 2 * t + 1] & 0x0F;
      out[t * kNf4Panel + c] = static_cast<uint8_t>(lo | (hi << 4));
    }
  }
}

uint8_t UnpackNf4(const uint8_t* panel, int64_t c, int64_t i) {
  const uint8_t byte = panel[(i / 2) * kNf4Panel + c];
  return (i % 2 == 0) ? (byte & 0x0F) : (byte >> 4);
}

void MatmulNf4Scalar(const float* x, int64_t n, int64_t k, const uint8_t* wq, const float* absmax,
                     int64_t block, const float* code, int64_t j0, int64_t j1, float* y,
                     int64_t ldy) {
  const int64_t blocks = k / block;
  for (int64_t r = 0; r < n; ++r) {
    const float* xr = x + r * k;
    for (int64_t j = j0; j < j1; ++j) {
      const int64_t p = j / kNf4Panel, c = j % kNf4Panel;
      const uint8_t* panel = wq + p * kNf4Panel * (k / 2);
      const float* am = absmax + p * blocks * kNf4Panel;
      float acc = 0;
      for (int64_t b = 0; b < blocks; ++b) {
        float t = 0;
        for (int64_t i = b * block; i < (b + 1) * block; ++i) {
          t = std::fma(code[UnpackNf4(panel, c, i)], xr[i], t);
        }
        acc = std::fma(t, am[b * kNf4Panel + c], acc);
      }
      y[r * ldy + (j - j0)] = acc;
    }
  }
}

void MatmulNf4(Isa isa, const float* x, int64_t n, int64_t k, const uint8_t* wq,
               const float* absmax, int64_t block, const float* code, int64_t j0, int64_t j1,
               float* y, int64_t ldy) {
  // More than one row: the block in chunks of kIntChunkColumns, as cpu::MatmulInt4 (a later row
  // group reads the chunk's panels from L2 instead of the block from DRAM again).
  ForEachIntChunk(n, j0, j1, [&](int64_t c0, int64_t c1) {
    float* yc = y + (c0 - j0);
    if (isa >= Isa::kAvx512) {
      MatmulNf4Avx512(x, n, k, wq, absmax, block, code, c0, c1, yc, ldy);
    } else if (isa >= Isa::kAvx2) {
      MatmulNf4Avx2(x, n, k, wq, absmax, block, code, c0, c1, yc, ldy);
    } else {
      MatmulNf4Scalar(x, n, k, wq, absmax, block, code, c0, c1, yc, ldy);
    }
  });
}

}  // namespace loom::cpu
