// bitsandbytes' 8-bit dynamic-map quantizer (double quant's absmax codes) against codes its own CPU kernel returned; the 4-bit quantizer's refusal of non-finite weights.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "ops/bnb_double_quant.h"
#include "ops/matmul_nf4.h"

namespace loom {
namespace {

// {value bits, code from bitsandbytes 0.50.2's cquantize_blockwise_cpu_fp32 (a block whose absmax
// is 1, so the value is its own normalized form), the nearest map entry}: values where the two
// differ, picked over [−1, 1] from 40,101 probed (uniform, dense near 0, and a sweep between
// entries 133 and 134, where the kernel never returns 134) by tools/ref/probe_bnb_dynamic_code.py,
// which also found the table rule equal to the kernel on all 40,101.
struct Probe {
  uint32_t bits;
  int kernel;
  int nearest;
};
constexpr Probe kProbes[] = {
    {0xbf7c66fb, 1, 0},     {0xba4a48de, 113, 114}, {0xba484e08, 113, 114}, {0xba2e7243, 115, 114},
    {0xb9e3facf, 116, 117}, {0xb9e04a36, 116, 117}, {0xb9ace3dd, 118, 117}, {0xb8bb6596, 121, 120},
    {0xb8a9bb97, 121, 120}, {0xb86fe8c6, 122, 121}, {0xb749e85b, 123, 124}, {0xb6b68ddb, 123, 125},
    {0x360a5f58, 131, 129}, {0x371ba2ee, 131, 130}, {0x386dac3e, 132, 133}, {0x38a4e37a, 133, 134},
    {0x38aea5a4, 133, 134}, {0x38b74a84, 133, 134}, {0x39abdef1, 136, 137}, {0x39afbba1, 136, 137},
};

int Nearest(float x) {
  const float* map = BnbDynamicMap();
  int best = 0;
  for (int i = 1; i < 256; ++i) {
    if (std::fabs(x - map[i]) < std::fabs(x - map[best])) best = i;
  }
  return best;
}

TEST(BnbDynamicCode, EqualsTheKernelWhereItDepartsFromNearest) {
  for (const Probe& p : kProbes) {
    const float x = std::bit_cast<float>(p.bits);
    EXPECT_EQ(BnbDynamicCode(x), p.kernel) << x;
    EXPECT_EQ(Nearest(x), p.nearest) << x;  // the probe is one where the rules differ
  }
}

// Away from the dense entries near 0 a map entry is its own code (the kernel agreed on these,
// and gave 131 for entry 127, 0.0); values past ±1 clamp.
TEST(BnbDynamicCode, MapEntriesAndTheEnds) {
  const float* map = BnbDynamicMap();
  for (int i : {0, 40, 64, 100, 160, 200, 255}) EXPECT_EQ(BnbDynamicCode(map[i]), i) << i;
  EXPECT_EQ(BnbDynamicCode(0.0f), 131);
  EXPECT_EQ(BnbDynamicCode(-5.0f), 0);
  EXPECT_EQ(BnbDynamicCode(5.0f), 255);
  EXPECT_EQ(BnbDynamicCode(1.0f), 255);
}


// --quantize nf4|fp4 of a weight holding Inf or NaN: an error naming the projection and row, with
// or without double quant (whose absmax mean would otherwise read the non-finite scale).
TEST(BnbDynamicCode, QuantizingANonFiniteWeightIsAnError) {
  for (const float bad : {std::numeric_limits<float>::infinity(), std::nanf("")}) {
    for (const bool dq : {false, true}) {
      std::vector<float> w(4 * 128, 0.25f);
      w[2 * 128 + 70] = bad;
      const Tensor t{DType::kF32, {4, 128}, w.data()};
      auto q = QuantizeWeightBnb4(t, "layers.0.mlp.up_proj", cpu::Bnb4Type::kNf4, 64, dq);
      ASSERT_FALSE(q.ok()) << bad << " dq " << dq;
      EXPECT_NE(q.status().message().find("layers.0.mlp.up_proj"), std::string::npos);
      EXPECT_NE(q.status().message().find("row 2"), std::string::npos) << q.status().message();
    }
  }
  std::vector<float> w(4 * 128, 0.25f);  // finite: quantizes
  EXPECT_TRUE(QuantizeWeightBnb4(Tensor{DType::kF32, {4, 128}, w.data()}, "p", cpu::Bnb4Type::kNf4, 64, true).ok());
}

}  // namespace
}  // namespace loom
