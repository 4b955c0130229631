// The bf16 KV cache (--kv-cache-dtype bfloat16): WriteKv rounds each K/V element to nearest even
// at its place, and every attention kernel over a bf16 cache computes bitwise what it computes
// over an f32 cache holding the same rounded values (the widening is exact).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "cpu/attention_cpu.h"
#include "model/kv_cache.h"
#include "ops/attention.h"
#include "tensor/dtype.h"

namespace loom {
namespace {

std::vector<float> Random(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.3f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng) * scale;
  return v;
}

std::vector<uint16_t> ToBf16(const std::vector<float>& x) {
  std::vector<uint16_t> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = F32ToBf16(x[i]);
  return out;
}

std::vector<float> Widen(const std::vector<uint16_t>& x) {
  std::vector<float> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = Bf16ToF32(x[i]);
  return out;
}

// An f32 K cache (heads of [hd, 16]) as a bf16 one: each element rounded, moved to its KeyIndex.
std::vector<uint16_t> KeysToBf16(const std::vector<float>& k, int hd) {
  std::vector<uint16_t> out(k.size());
  const size_t head = size_t{kKvBlockSize} * static_cast<size_t>(hd);
  for (size_t h0 = 0; h0 < k.size(); h0 += head) {
    for (int d = 0; d < hd; ++d) {
      for (int slot = 0; slot < kKvBlockSize; ++slot) {
        out[h0 + static_cast<size_t>(cpu::KeyIndex<uint16_t>(slot, d))] =
            F32ToBf16(k[h0 + static_cast<size_t>(cpu::KeyIndex<float>(slot, d))]);
      }
    }
  }
  return out;
}

TEST(KvCacheBf16, OddHeadDimIsRefused) {
  auto cache = KvCache::Create(2, 2, 63, 4, KvDtype::kBf16);
  ASSERT_FALSE(cache.ok());
  EXPECT_EQ(cache.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(cache.status().message().find("even head_dim"), std::string::npos);
  EXPECT_TRUE(KvCache::Create(2, 2, 63, 4, KvDtype::kF32).ok());
}

TEST(KvCacheBf16, HalfTheBytes) {
  const auto f32 = KvCache::BytesFor(24, 2, 64, 1000, KvDtype::kF32);
  const auto bf16 = KvCache::BytesFor(24, 2, 64, 1000, KvDtype::kBf16);
  ASSERT_TRUE(f32 && bf16);
  EXPECT_EQ(*f32, uint64_t{1008} * 24 * 2 * 64 * 2 * 4);  // whole blocks: 63 × 16 positions
  EXPECT_EQ(*bf16 * 2, *f32);
  auto cache = KvCache::Create(3, 2, 64, 5, KvDtype::kBf16);
  ASSERT_TRUE(cache.ok()) << cache.status().ToString();
  EXPECT_EQ((*cache)->bytes(), *KvCache::BytesFor(3, 2, 64, 80, KvDtype::kBf16));
  EXPECT_EQ((*cache)->dtype(), KvDtype::kBf16);
  const KvLayerView l0 = (*cache)->Layer(0), l2 = (*cache)->Layer(2);
  EXPECT_EQ(l0.dtype, KvDtype::kBf16);
  // Layers 2 bytes an element apart: layer 2 starts 2 layers of 5 blocks in.
  EXPECT_EQ(static_cast<const uint8_t*>(l2.k) - static_cast<const uint8_t*>(l0.k),
            2 * 5 * l0.block_stride() * 2);
  EXPECT_STREQ(KvDtypeName(KvDtype::kBf16), "bfloat16");
  EXPECT_STREQ(KvDtypeName(KvDtype::kF32), "float32");
}

// Every element of the bf16 cache is the f32 cache's element rounded to nearest even (ties and
// a NaN included), V at the same place and K at its KeyIndex (dimension pairs interleaved), for
// chunks over scrambled blocks.
TEST(KvCacheBf16, WriteKvRoundsEachElementInPlace) {
  const int kvh = 2, hd = 24, blocks = 6;
  const size_t elems = static_cast<size_t>(blocks) * kvh * kKvBlockSize * hd;
  std::vector<float> kf(elems, 0.0f), vf(elems, 0.0f);
  std::vector<uint16_t> kb(elems, 0), vb(elems, 0);
  KvLayerView f32{kf.data(), vf.data(), kvh, hd, KvDtype::kF32};
  KvLayerView bf16{kb.data(), vb.data(), kvh, hd, KvDtype::kBf16};
  std::vector<int32_t> table_a = {4, 1}, table_b = {5, 0, 3};
  const std::vector<AttentionChunk> chunks = {{0, 19, 0, table_a.data(), 2},
                                              {19, 9, 33, table_b.data(), 3}};
  const int n = 28;
  auto k = Random(static_cast<size_t>(n) * kvh * hd, 1), v = Random(k.size(), 2);
  k[5] = 1.00390625f;  // 1 + 2^-8: a tie, rounds to even (1.0)
  v[7] = 1.01171875f;  // 1 + 3·2^-8: a tie, rounds to even (1 + 2^-6)
  k[9] = std::nanf("");
  WriteKv(f32, chunks, k.data(), v.data());
  WriteKv(bf16, chunks, k.data(), v.data());
  int written = 0;
  const int64_t head = int64_t{kKvBlockSize} * hd;
  for (size_t i = 0; i < elems; ++i) {
    ASSERT_EQ(vb[i], F32ToBf16(vf[i])) << "V element " << i;
    // f32 K: [hd, 16] per head; bf16 K: [hd / 2, 16, 2].
    const int64_t h0 = static_cast<int64_t>(i) / head * head;
    const int d = static_cast<int>((static_cast<int64_t>(i) - h0) / kKvBlockSize);
    const int slot = static_cast<int>((static_cast<int64_t>(i) - h0) % kKvBlockSize);
    ASSERT_EQ(i, static_cast<size_t>(h0 + cpu::KeyIndex<float>(slot, d)));
    ASSERT_EQ(kb[static_cast<size_t>(h0 + cpu::KeyIndex<uint16_t>(slot, d))], F32ToBf16(kf[i]))
        << "K element " << i;
    written += kf[i] != 0.0f;
  }
  EXPECT_EQ(written, n * kvh * hd);
  // Row 0 is chunk a's position 0: block 4, slot 0, KV head 0; K element 5 (pair 2, odd) at
  // 2·32 + 1, V's element 7 at 7.
  const size_t block4 = 4 * static_cast<size_t>(kvh * kKvBlockSize * hd);
  EXPECT_EQ(kb[block4 + 65], 0x3f80);  // 1.0
  EXPECT_EQ(vb[block4 + 7], 0x3f82);   // 1.015625
}

// AttendHeads over a bf16 cache, at every ISA level present, for 1-9 heads (the AVX-512 score
// pass takes 1, 2 or 3-8 heads with 8, 4 or 2 blocks; V 1-4 heads at a time), head sizes with and
// without a register-resident path (AVX-512 at 64/128/256; avx2 with 1-8 8-wide chunks, even
// counts as even/odd pairs; the scalar fallback of the avx2 level), soft-capping and windows from
// mid-block: bitwise the f32 kernel over the widened values, and away from the f32 kernel over
// the unrounded ones by no more than the rounding allows.
TEST(KvCacheBf16, KernelsEqualTheF32KernelsOverTheRoundedValues) {
  for (cpu::Isa isa : {cpu::Isa::kScalar, cpu::Isa::kAvx2, cpu::Isa::kAvx512}) {
    if (cpu::DetectIsa() < isa) continue;
    for (int hd : {64, 128, 256, 80, 20, 8, 12, 24, 40, 56, 96, 112}) {
      const size_t elems = size_t{10} * 2 * kKvBlockSize * static_cast<size_t>(hd);
      const auto k = Random(elems, 10), v = Random(elems, 11);
      const auto kb = KeysToBf16(k, hd), vb = ToBf16(v);
      const auto kw = Widen(ToBf16(k)), vw = Widen(vb);
      const std::vector<int32_t> table = {7, 2, 0, 9, 4, 1, 8, 3, 6, 5};
      const int64_t stride = int64_t{2} * kKvBlockSize * hd, offset = int64_t{kKvBlockSize} * hd;
      const cpu::PagedKvHeadBf16 hb{kb.data(), vb.data(), stride, offset, table.data()};
      const cpu::PagedKvHead hw{kw.data(), vw.data(), stride, offset, table.data()};
      const cpu::PagedKvHead hf{k.data(), v.data(), stride, offset, table.data()};
      for (int heads : {1, 2, 3, 4, 5, 7, 9}) {
        auto q = Random(static_cast<size_t>(heads * hd), 12 + heads, 0.5f);
        for (float cap : {0.0f, 2.5f}) {
          for (auto [first, last] :
               std::vector<std::pair<int, int>>{{0, 0}, {5, 40}, {16, 63}, {19, 150}, {0, 159}}) {
            const int64_t ss = 160;
            const size_t out_n = static_cast<size_t>(heads * hd);
            std::vector<float> sb(static_cast<size_t>(heads * ss), -3.0f), sw(sb), sf(sb);
            std::vector<float> ob(out_n), ow(out_n), of(out_n);
            const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
            cpu::AttendHeads(isa, heads, q.data(), hd, hd, hb, first, last, scale, cap, sb.data(),
                             ss, ob.data(), hd);
            cpu::AttendHeads(isa, heads, q.data(), hd, hd, hw, first, last, scale, cap, sw.data(),
                             ss, ow.data(), hd);
            cpu::AttendHeads(isa, heads, q.data(), hd, hd, hf, first, last, scale, cap, sf.data(),
                             ss, of.data(), hd);
            ASSERT_EQ(sb, sw) << cpu::IsaName(isa) << " hd " << hd << " heads " << heads;
            for (size_t i = 0; i < out_n; ++i) {
              ASSERT_EQ(ob[i], ow[i])
                  << cpu::IsaName(isa) << " hd " << hd << " heads " << heads << " cap " << cap
                  << " [" << first << ", " << last << "] at " << i;
              // Each K and V element moves by ≤ 2^-9 relative; the output, a convex mix of V
              // rows (|v| ≲ 5 here) under weights moved by the scores' change (|q|·|K|·2^-9
              // over hd terms, ~0.05 at hd 256), moves by far less than 0.05.
              ASSERT_NEAR(ob[i], of[i], 0.05f) << cpu::IsaName(isa) << " hd " << hd;
            }
          }
        }
      }
    }
  }
}

// Attention over a bf16 layer view dispatches to the bf16 kernels: bitwise the f32 view over the
// rounded values, and not bitwise the f32 view over the unrounded ones (the rounding is real).
TEST(KvCacheBf16, AttentionOverABf16ViewEqualsF32ViewOfRoundedValues) {
  const int kvh = 2, heads = 14, hd = 64, blocks = 8;
  const size_t elems = static_cast<size_t>(blocks) * kvh * kKvBlockSize * hd;
  std::vector<float> kf(elems), vf(elems);
  std::vector<uint16_t> kb(elems), vb(elems);
  KvLayerView f32{kf.data(), vf.data(), kvh, hd, KvDtype::kF32};
  KvLayerView bf16{kb.data(), vb.data(), kvh, hd, KvDtype::kBf16};
  std::vector<int32_t> table_a = {5, 2, 7}, table_b = {1, 6};
  const std::vector<AttentionChunk> chunks = {{0, 40, 0, table_a.data(), 3},
                                              {40, 30, 0, table_b.data(), 2}};
  const int n = 70;
  auto q = Random(static_cast<size_t>(n) * heads * hd, 20);
  auto k = Random(static_cast<size_t>(n) * kvh * hd, 21), v = Random(k.size(), 22);
  WriteKv(bf16, chunks, k.data(), v.data());
  std::vector<float> out_b(q.size()), out_w(q.size()), out_f(q.size());
  Attention(bf16, chunks, q.data(), heads, 0, 0.125f, out_b.data());
  WriteKv(f32, chunks, k.data(), v.data());
  Attention(f32, chunks, q.data(), heads, 0, 0.125f, out_f.data());
  // The f32 cache of the rounded inputs.
  const std::vector<float> kr = Widen(ToBf16(k)), vr = Widen(ToBf16(v));
  WriteKv(f32, chunks, kr.data(), vr.data());
  Attention(f32, chunks, q.data(), heads, 0, 0.125f, out_w.data());
  EXPECT_EQ(out_b, out_w);
  EXPECT_NE(out_b, out_f);
  for (size_t i = 0; i < out_b.size(); ++i) ASSERT_NEAR(out_b[i], out_f[i], 0.05f) << i;
}

}  // namespace
}  // namespace loom
