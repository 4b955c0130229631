// f16/bf16 conversions: exhaustive f16 round trips and round-to-nearest-even checks.
#include <gtest/gtest.h>

#include <cmath>

#include "tensor/dtype.h"

namespace loom {
namespace {

TEST(DType, EveryF16ValueRoundTrips) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = F16ToF32(static_cast<uint16_t>(h));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(F16ToF32(F32ToF16(f))));
      continue;
    }
    ASSERT_EQ(F32ToF16(f), h) << std::hex << h;
  }
}

TEST(DType, F16KnownValues) {
  EXPECT_EQ(F16ToF32(0x3c00), 1.0f);
  EXPECT_EQ(F16ToF32(0xc000), -2.0f);
  EXPECT_EQ(F16ToF32(0x7bff), 65504.0f);
  EXPECT_EQ(F16ToF32(0x0001), std::ldexp(1.0f, -24));  // smallest subnormal
  EXPECT_EQ(F32ToF16(65520.0f), 0x7c00);               // rounds to inf
  EXPECT_EQ(F32ToF16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);  // tie → even
  EXPECT_EQ(F32ToF16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);  // tie → even (up)
  EXPECT_EQ(F32ToF16(std::ldexp(1.0f, -25)), 0x0000);   // tie between 0 and min subnormal → 0
  EXPECT_EQ(F32ToF16(std::ldexp(1.5f, -25)), 0x0001);
}

TEST(DType, Bf16RoundsToNearestEven) {
  EXPECT_EQ(F32ToBf16(1.0f), 0x3f80);
  EXPECT_EQ(Bf16ToF32(0x3f80), 1.0f);
  EXPECT_EQ(F32ToBf16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);      // tie → even
  EXPECT_EQ(F32ToBf16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);  // tie → even (up)
  EXPECT_EQ(F32ToBf16(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20)), 0x3f81);
  EXPECT_TRUE(std::isnan(Bf16ToF32(F32ToBf16(NAN))));
  for (uint32_t h = 0; h < 0x10000; h += 7) {
    const float f = Bf16ToF32(static_cast<uint16_t>(h));
    if (!std::isnan(f)) {
      ASSERT_EQ(F32ToBf16(f), h);
    }
  }
}

}  // namespace
}  // namespace loom
