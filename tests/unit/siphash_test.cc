// SipHash-2-4 against the reference vectors; streaming equals one shot; the process key is fixed.
#include "base/siphash.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

namespace loom {
namespace {

SipKey PaperKey() {  // bytes 00 01 … 0f
  return SipKey{0x0706050403020100ull, 0x0f0e0d0c0b0a0908ull};
}

TEST(SipHashTest, ReferenceVectors) {
  // Key 00..0f, message 00..len-1 (the reference implementation's vectors.h; 15 bytes is the
  // paper's worked example).
  uint8_t msg[16];
  for (int i = 0; i < 16; ++i) msg[i] = static_cast<uint8_t>(i);
  const std::pair<size_t, uint64_t> cases[] = {
      {0, 0x726fdb47dd0e0e31ull},  {1, 0x74f839c593dc67fdull}, {2, 0x0d6c8009d9a94f5aull},
      {3, 0x85676696d7fb7e2dull},  {4, 0xcf2794e0277187b7ull}, {8, 0x93f5f5799a932462ull},
      {15, 0xa129ca6149be45e5ull},
  };
  for (const auto& [len, want] : cases) {
    EXPECT_EQ(SipHash24(PaperKey(), msg, len), want) << "length " << len;
  }
}

TEST(SipHashTest, StreamingEqualsOneShot) {
  std::mt19937 rng(7);
  std::vector<uint8_t> data(300);
  for (auto& b : data) b = static_cast<uint8_t>(rng());
  for (size_t len = 0; len <= data.size(); len += 13) {
    const uint64_t want = SipHash24(PaperKey(), data.data(), len);
    for (int trial = 0; trial < 5; ++trial) {
      SipHasher h(PaperKey());
      size_t at = 0;
      while (at < len) {
        const size_t n = std::min(len - at, static_cast<size_t>(rng() % 11));
        h.Update(data.data() + at, n);
        at += n;
      }
      EXPECT_EQ(h.Final(), want) << "length " << len;
    }
  }
}

TEST(SipHashTest, TheKeyMatters) {
  const char msg[] = "same bytes";
  const SipKey other{1, 2};
  EXPECT_NE(SipHash24(PaperKey(), msg, sizeof(msg)), SipHash24(other, msg, sizeof(msg)));
  // The process key is drawn once and is not the all-zero key.
  const SipKey& k = ProcessSipKey();
  EXPECT_EQ(&k, &ProcessSipKey());
  EXPECT_TRUE(k.k0 != 0 || k.k1 != 0);
}

}  // namespace
}  // namespace loom
