// Row ops (RMSNorm, SiLU·mul, RoPE) and paged attention against plain double-precision references.
#include <gtest/gtest.h>

#include <cmath>
#include <initializer_list>
#include <random>
#include <vector>

#include "cpu/activation_cpu.h"
#include "cpu/cpu_features.h"
#include "ops/attention.h"
#include "ops/basic_ops.h"
#include "ops/rope.h"

namespace loom {
namespace {

std::vector<float> Random(size_t n, uint32_t seed, float mean = 0.3f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(mean, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

TEST(Ops, RmsNormMatchesReference) {
  const int64_t n = 5, d = 67;
  auto x = Random(n * d, 1);
  auto w = Random(d, 2, 1.0f);
  std::vector<float> out(n * d);
  RmsNorm(x.data(), n, d, w.data(), 1e-5, out.data());
  for (int64_t r = 0; r < n; ++r) {
    double ss = 0;
    for (int64_t i = 0; i < d; ++i) ss += double(x[r * d + i]) * x[r * d + i];
    const double inv = 1.0 / std::sqrt(ss / d + 1e-5);
    for (int64_t i = 0; i < d; ++i) {
      ASSERT_NEAR(out[r * d + i], w[i] * x[r * d + i] * inv, 1e-5);
    }
  }
}

TEST(Ops, SiluMulMatchesReference) {
  auto g = Random(100, 3), u = Random(100, 4);
  auto out = g;
  SiluMulInPlace(out.data(), u.data(), 100);
  for (size_t i = 0; i < 100; ++i) {
    const double s = g[i] / (1.0 + std::exp(-double(g[i])));
    ASSERT_NEAR(out[i], s * u[i], 1e-6);
  }
}

// Every SiLU kernel the CPU has (scalar, AVX2's and AVX-512's libmvec expf) against a double
// reference, with the vector loops' tails and gates large enough that e^−g overflows (→ −0).
TEST(Ops, SiluMulEveryLevelMatchesReference) {
  auto g = Random(203, 7), u = Random(203, 8);
  for (size_t i = 0; i < g.size(); ++i) g[i] *= 12.0f;
  g[5] = 100.0f;
  g[6] = -100.0f;
  for (cpu::Isa isa : {cpu::Isa::kScalar, cpu::Isa::kAvx2, cpu::Isa::kAvx512}) {
    if (cpu::DetectIsa() < isa) continue;
    auto out = g;
    cpu::SiluMul(isa, out.data(), u.data(), static_cast<int64_t>(out.size()));
    for (size_t i = 0; i < g.size(); ++i) {
      const double s = g[i] / (1.0 + std::exp(-double(g[i])));
      ASSERT_NEAR(out[i], s * u[i], 1e-6 * (1 + std::fabs(s * u[i]))) << cpu::IsaName(isa) << " at " << i;
    }
  }
}

// An element's SiLU at each level is the same bits wherever it sits in a call: alone, in a
// vector body, or in a tail (the vector loops' tails ran libm's expf, the bodies libmvec's, so a
// row at an unaligned offset in a batch — an expert FFN of 24 — came out differently).
TEST(Ops, SiluMulElementIndependentOfItsPlaceInTheCall) {
  auto g = Random(61, 9), u = Random(61, 10);
  for (size_t i = 0; i < g.size(); ++i) g[i] *= 6.0f;
  for (cpu::Isa isa : {cpu::Isa::kScalar, cpu::Isa::kAvx2, cpu::Isa::kAvx512}) {
    if (cpu::DetectIsa() < isa) continue;
    for (int64_t offset : {0, 1, 5, 8, 13, 16, 24, 37}) {
      auto all = g;
      cpu::SiluMul(isa, all.data() + offset, u.data() + offset,
                   static_cast<int64_t>(g.size()) - offset);
      for (size_t i = static_cast<size_t>(offset); i < g.size(); ++i) {
        float one = g[i];
        cpu::SiluMul(isa, &one, &u[i], 1);
        ASSERT_EQ(one, all[i]) << cpu::IsaName(isa) << " offset " << offset << " element " << i;
      }
    }
  }
}

// Gemma's GeGLU (gelu_pytorch_tanh) and logit soft-capping against double references.
TEST(Ops, GeluTanhMulAndSoftCapMatchReference) {
  auto g = Random(100, 5), u = Random(100, 6);
  for (size_t i = 0; i < 10; ++i) g[i] *= 8.0f;  // the saturating tails too
  auto out = g;
  GeluTanhMulInPlace(out.data(), u.data(), 100);
  for (size_t i = 0; i < 100; ++i) {
    const double v = g[i];
    const double gelu = 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
    ASSERT_NEAR(out[i], gelu * u[i], 1e-6 * (1 + std::fabs(gelu)));
  }
  auto x = g;
  SoftCapInPlace(x.data(), 100, 2.5f);
  for (size_t i = 0; i < 100; ++i) ASSERT_NEAR(x[i], std::tanh(g[i] / 2.5) * 2.5, 1e-6);
}

// The exact GELU (transformers' "gelu") against std::erf in double, tails included; and it is
// not the tanh form (they differ by up to ~5e-4 near |v| = 2).
TEST(Ops, GeluErfMulMatchesStdErf) {
  auto g = Random(200, 7), u = Random(200, 8);
  for (size_t i = 0; i < 20; ++i) g[i] *= 8.0f;
  g[20] = 0.0f;
  g[21] = -2.0f;
  g[22] = 2.0f;
  auto out = g, tanh_form = g;
  GeluErfMulInPlace(out.data(), u.data(), 200);
  GeluTanhMulInPlace(tanh_form.data(), u.data(), 200);
  double farthest = 0;
  for (size_t i = 0; i < 200; ++i) {
    const double v = g[i];
    const double gelu = 0.5 * v * (1 + std::erf(v / std::sqrt(2.0)));
    ASSERT_NEAR(out[i], gelu * u[i], 1e-6 * (1 + std::fabs(gelu * u[i]))) << "v = " << v;
    farthest = std::max(farthest, std::fabs(static_cast<double>(out[i]) - tanh_form[i]));
  }
  EXPECT_EQ(out[20], 0.0f);
  EXPECT_GT(farthest, 1e-5);
}

TEST(Ops, RopeRotatesHalvesByPositionTimesFrequency) {
  RopeConfig rope;
  rope.theta = 10000;
  const int heads = 3, hd = 8;
  auto inv = RopeInverseFrequencies(rope, hd);
  ASSERT_EQ(inv.size(), 4u);
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(inv[i], std::pow(10000.0, -2.0 * i / hd), 1e-7);
  const std::vector<int32_t> pos = {0, 5, 1000};
  auto x = Random(pos.size() * heads * hd, 5);
  auto y = x;
  ApplyRope(y.data(), pos.size(), heads, hd, pos.data(), inv);
  for (size_t r = 0; r < pos.size(); ++r) {
    for (int h = 0; h < heads; ++h) {
      const float* a = &x[(r * heads + h) * hd];
      const float* b = &y[(r * heads + h) * hd];
      for (int i = 0; i < hd / 2; ++i) {
        const double ang = double(float(pos[r]) * inv[i]);
        const double re = a[i] * std::cos(ang) - a[i + hd / 2] * std::sin(ang);
        const double im = a[i + hd / 2] * std::cos(ang) + a[i] * std::sin(ang);
        ASSERT_NEAR(b[i], re, 1e-5);
        ASSERT_NEAR(b[i + hd / 2], im, 1e-5);
      }
    }
  }
}

TEST(Ops, LongRopePartialRotaryAndAttentionFactor) {
  RopeConfig rope;
  rope.theta = 10000;
  rope.scaling = RopeScaling::kLongRope;
  rope.rotary_dim = 12;  // of head_dim 16
  rope.short_factor = {1, 1.5, 2, 2.5, 3, 3.5};
  rope.long_factor = {2, 4, 6, 8, 10, 12};
  const int hd = 16, heads = 2;
  const auto s = RopeInverseFrequencies(rope, hd);
  const auto l = RopeInverseFrequencies(rope, hd, true);
  ASSERT_EQ(s.size(), 6u);
  ASSERT_EQ(l.size(), 6u);
  for (int i = 0; i < 6; ++i) {  // 1 / (ext · theta^(2i/12))
    EXPECT_NEAR(s[i], 1.0 / (rope.short_factor[i] * std::pow(10000.0, 2.0 * i / 12)), 1e-6);
    EXPECT_NEAR(l[i], 1.0 / (rope.long_factor[i] * std::pow(10000.0, 2.0 * i / 12)), 1e-6);
  }
  const std::vector<int32_t> pos = {0, 7};
  auto x = Random(pos.size() * heads * hd, 9);
  auto y = x;
  const float scale = 1.25f;
  ApplyRope(y.data(), pos.size(), heads, hd, pos.data(), l, scale);
  for (size_t r = 0; r < pos.size(); ++r) {
    for (int h = 0; h < heads; ++h) {
      const float* a = &x[(r * heads + h) * hd];
      const float* b = &y[(r * heads + h) * hd];
      for (int i = 0; i < 6; ++i) {  // pairs (i, i + 6) rotate, scaled
        const double ang = double(float(pos[r]) * l[i]);
        EXPECT_NEAR(b[i], scale * (a[i] * std::cos(ang) - a[i + 6] * std::sin(ang)), 1e-5);
        EXPECT_NEAR(b[i + 6], scale * (a[i + 6] * std::cos(ang) + a[i] * std::sin(ang)), 1e-5);
      }
      for (int i = 12; i < hd; ++i) EXPECT_EQ(b[i], a[i]);  // the pass-through tail
    }
  }
}

TEST(Ops, RopeScalingRules) {
  RopeConfig base;
  base.theta = 10000;
  RopeConfig linear = base;
  linear.scaling = RopeScaling::kLinear;
  linear.factor = 4;
  RopeConfig l3 = base;
  l3.scaling = RopeScaling::kLlama3;
  l3.factor = 8;
  l3.low_freq_factor = 1;
  l3.high_freq_factor = 4;
  l3.original_max_position = 64;
  const int hd = 16;
  auto b = RopeInverseFrequencies(base, hd);
  auto li = RopeInverseFrequencies(linear, hd);
  auto l3i = RopeInverseFrequencies(l3, hd);
  int unchanged = 0, divided = 0, smoothed = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    EXPECT_FLOAT_EQ(li[i], b[i] / 4);
    const double wavelen = 2 * M_PI / b[i];
    if (wavelen < 64.0 / 4) {
      EXPECT_FLOAT_EQ(l3i[i], b[i]);
      ++unchanged;
    } else if (wavelen > 64.0) {
      EXPECT_FLOAT_EQ(l3i[i], b[i] / 8);
      ++divided;
    } else {
      const double s = (64.0 / wavelen - 1) / (4 - 1);
      EXPECT_NEAR(l3i[i], (1 - s) * b[i] / 8 + s * b[i], 1e-6);
      ++smoothed;
    }
  }
  EXPECT_GT(unchanged, 0);
  EXPECT_GT(divided, 0);
  EXPECT_GT(smoothed, 0);
}

// Two sequences with scrambled block tables; reference is dense attention per sequence.
TEST(Ops, PagedAttentionMatchesDenseReference) {
  const int kvh = 2, heads = 4, hd = 8, blocks = 8;
  std::vector<float> kstore(blocks * kvh * kKvBlockSize * hd), vstore(kstore.size());
  KvLayerView view{kstore.data(), vstore.data(), kvh, hd};
  const int len_a = 21, len_b = 6;
  std::vector<int32_t> table_a = {5, 2}, table_b = {7};
  // (window, softcap): full, sliding, sliding with Gemma 2 score soft-capping.
  for (auto [window, cap] : std::vector<std::pair<int, float>>{{0, 0.f}, {5, 0.f}, {5, 0.5f}}) {
    // Prefill A fully and B fully in one batch; the last rows check against the dense result.
    std::vector<AttentionChunk> chunks = {{0, len_a, 0, table_a.data(), 2},
                                          {len_a, len_b, 0, table_b.data(), 1}};
    const int n = len_a + len_b;
    auto q = Random(n * heads * hd, 10), k = Random(n * kvh * hd, 11), v = Random(n * kvh * hd, 12);
    WriteKv(view, chunks, k.data(), v.data());
    std::vector<float> out(n * heads * hd);
    const float scale = 1 / std::sqrt(float(hd));
    Attention(view, chunks, q.data(), heads, window, scale, out.data(), cap);
    for (const auto& c : chunks) {
      for (int i = 0; i < c.num_rows; ++i) {
        const int row = c.first_row + i;
        for (int h = 0; h < heads; ++h) {
          const int g = h / (heads / kvh);
          const int first = window > 0 ? std::max(0, i - window + 1) : 0;
          std::vector<double> s;
          double mx = -1e30;
          for (int p = first; p <= i; ++p) {
            double dot = 0;
            for (int d = 0; d < hd; ++d)
              dot += double(q[(row * heads + h) * hd + d]) * k[((c.first_row + p) * kvh + g) * hd + d];
            s.push_back(cap > 0 ? std::tanh(dot * scale / cap) * cap : dot * scale);
            mx = std::max(mx, s.back());
          }
          double z = 0;
          for (double& e : s) z += (e = std::exp(e - mx));
          for (int d = 0; d < hd; ++d) {
            double o = 0;
            for (int p = first; p <= i; ++p) o += s[p - first] / z * v[((c.first_row + p) * kvh + g) * hd + d];
            ASSERT_NEAR(out[(row * heads + h) * hd + d], o, 1e-5) << "window " << window << " cap " << cap;
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace loom

#include "cpu/attention_cpu.h"

namespace loom {
namespace {

using AttendRowFn = void (*)(const float*, int, const cpu::PagedKvHead&, int, int, float, float,
                             float*, float*);

// `kernel` against the scalar row over head sizes `hds`, with and without soft-capping, for
// position ranges inside one cache block and across blocks (the block table is permuted); the
// score scratch outside [first, last] stays untouched.
void ExpectAttendRowMatchesScalar(AttendRowFn kernel, std::initializer_list<int> hds) {
  for (int hd : hds) {
    // 10 blocks: the one-head AVX-512 path takes 8 blocks at a time, the avx2 one 4.
    const int blocks = 10;
    auto k = Random(blocks * 2 * kKvBlockSize * hd, 30), v = Random(k.size(), 31);
    auto q = Random(hd, 32);
    for (float& x : q) x *= 4;  // scores of a few units: a softmax far from uniform
    const std::vector<int32_t> table = {3, 0, 9, 2, 7, 1, 5, 8, 4, 6};
    cpu::PagedKvHead head{k.data(), v.data(), int64_t{2} * kKvBlockSize * hd,
                          int64_t{kKvBlockSize} * hd, table.data()};
    std::vector<float> s1(160), o1(hd), o2(hd);
    for (float cap : {0.0f, 2.5f}) {
      for (auto [first, last] : std::vector<std::pair<int, int>>{
               {0, 0}, {0, 63}, {17, 40}, {15, 16}, {5, 5}, {31, 47}, {33, 62}, {0, 159},
               {19, 150}, {7, 127}, {40, 108}}) {
        std::vector<float> s2(160, -7.0f);
        cpu::AttendRowScalar(q.data(), hd, head, first, last, 0.125f, cap, s1.data(), o1.data());
        kernel(q.data(), hd, head, first, last, 0.125f, cap, s2.data(), o2.data());
        for (int d = 0; d < hd; ++d) {
          ASSERT_NEAR(o1[d], o2[d], 1e-5) << hd << " " << first << " " << last << " cap " << cap;
        }
        for (int p = 0; p < 160; ++p) {
          if (p < first || p > last) {
            ASSERT_EQ(s2[p], -7.0f) << "scratch " << p << " written";
          }
        }
      }
    }
  }
}

TEST(AttentionKernels, Avx512RowMatchesScalar) {
  if (cpu::DetectIsa() < cpu::Isa::kAvx512) GTEST_SKIP() << "no AVX-512";
  ExpectAttendRowMatchesScalar(cpu::AttendRowAvx512, {64, 20, 128, 256, 80, 72, 8, 2, 6, 512});
}

// Several query heads on one KV head in one call (K rows loaded once for up to 8 heads, V for up
// to 4): each head's output and scores bitwise those of a one-head call, at every level, for
// 1-10 heads (Qwen2's groups are 7; 9 and 10 split as 8 + the rest), head sizes with and without
// a register-resident path, soft-capping, and windows from mid-block over up to 10 blocks (the
// grouped calls take 2-8 blocks at a time).
TEST(AttentionKernels, HeadsOfOneKvHeadEqualOneHeadCalls) {
  for (cpu::Isa isa : {cpu::Isa::kScalar, cpu::Isa::kAvx2, cpu::Isa::kAvx512}) {
    if (cpu::DetectIsa() < isa) continue;
    for (int hd : {64, 128, 256, 80, 20, 2, 512}) {
      auto k = Random(10 * 2 * kKvBlockSize * hd, 40), v = Random(k.size(), 41);
      const std::vector<int32_t> table = {2, 0, 3, 1, 9, 5, 7, 4, 8, 6};
      cpu::PagedKvHead head{k.data(), v.data(), int64_t{2} * kKvBlockSize * hd,
                            int64_t{kKvBlockSize} * hd, table.data()};
      for (int heads = 1; heads <= 10; ++heads) {
        auto q = Random(heads * hd, 42 + heads);
        for (float& x : q) x *= 4;
        for (float cap : {0.0f, 2.5f}) {
          for (auto [first, last] :
               std::vector<std::pair<int, int>>{{0, 0}, {3, 50}, {16, 63}, {19, 150}, {0, 159}}) {
            const int64_t stride = 160;
            std::vector<float> s_one(160), o_one(static_cast<size_t>(heads * hd));
            std::vector<float> s_all(static_cast<size_t>(heads * stride)),
                o_all(o_one.size(), -1.0f);
            cpu::AttendHeads(isa, heads, q.data(), hd, hd, head, first, last, 0.125f, cap,
                             s_all.data(), stride, o_all.data(), hd);
            for (int h = 0; h < heads; ++h) {
              cpu::AttendRow(isa, q.data() + h * hd, hd, head, first, last, 0.125f, cap,
                             s_one.data(), o_one.data() + h * hd);
              for (int p = first; p <= last; ++p) {
                ASSERT_EQ(s_all[static_cast<size_t>(h * stride + p)],
                          s_one[static_cast<size_t>(p)]);
              }
            }
            for (size_t i = 0; i < o_one.size(); ++i) {
              ASSERT_EQ(o_all[i], o_one[i])
                  << cpu::IsaName(isa) << " hd " << hd << " heads " << heads << " cap " << cap
                  << " [" << first << ", " << last << "] at " << i;
            }
          }
        }
      }
    }
  }
}

// The avx2 kernel (8-lane keys, exp and V; head sizes not a multiple of 8 fall back to scalar).
TEST(AttentionKernels, Avx2RowMatchesScalar) {
  if (cpu::DetectIsa() < cpu::Isa::kAvx2) GTEST_SKIP() << "no AVX2";
  ExpectAttendRowMatchesScalar(cpu::AttendRowAvx2, {64, 20, 128, 256, 80, 72, 8, 2, 6, 512});
}

}  // namespace
}  // namespace loom

#include "cpu/lora_cpu.h"
#include "kernel_test_util.h"

namespace loom {
namespace {

TEST(LoraKernels, Avx512ExpandMatchesScalarForEveryDtype) {
  if (cpu::DetectIsa() < cpu::Isa::kAvx512) GTEST_SKIP() << "no AVX-512";
  const int rank = 5;
  const int64_t out = 77, rows = 6;
  auto t = Random(rows * rank, 50);
  auto bf = Random(rank * out, 51);
  for (DType dt : {DType::kF32, DType::kF16, DType::kBF16}) {
    const auto bt = PackedBt(dt, bf, rank, out);
    for (auto [j0, j1] : std::vector<std::pair<int64_t, int64_t>>{{0, 77}, {16, 40}, {70, 77}}) {
      std::vector<float> a((j1 - j0) * rows), b(a.size());
      cpu::LoraExpandScalar(t.data(), rows, rank, dt, bt.data(), out, j0, j1, a.data());
      cpu::LoraExpandAvx512(t.data(), rows, rank, dt, bt.data(), out, j0, j1, b.data());
      for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], 1e-5f) << DTypeName(dt);
    }
  }
}

TEST(LoraKernels, ShrinkMatchesScalarForEveryDtypeAndIsRowInvariant) {
  if (cpu::DetectIsa() < cpu::Isa::kAvx512) GTEST_SKIP() << "no AVX-512";
  for (int rank : {16, 5, 1}) {
    for (int64_t in : {896, 77, 16, 3}) {
      const int64_t rows = 9;
      auto x = Random(rows * in, 60);
      auto af = Random(rank * in, 61);
      for (DType dt : {DType::kF32, DType::kF16, DType::kBF16}) {
        std::vector<uint8_t> a(af.size() * DTypeSize(dt));
        ConvertFromF32(dt, af.data(), a.data(), static_cast<int64_t>(af.size()));
        std::vector<float> ref(rows * rank), all(rows * rank);
        cpu::LoraShrinkScalar(x.data(), rows, in, dt, a.data(), rank, ref.data());
        cpu::LoraShrinkAvx512(x.data(), rows, in, dt, a.data(), rank, all.data());
        for (size_t i = 0; i < ref.size(); ++i) {
          ASSERT_NEAR(ref[i], all[i], 1e-5f * std::sqrt(float(in))) << DTypeName(dt) << " " << in;
        }
        // Each row alone, and rows 2..6 as one call: the same bits as all rows together.
        for (int64_t r = 0; r < rows; ++r) {
          std::vector<float> one(rank);
          cpu::LoraShrinkAvx512(x.data() + r * in, 1, in, dt, a.data(), rank, one.data());
          for (int k = 0; k < rank; ++k) ASSERT_EQ(one[k], all[r * rank + k]) << r << " " << k;
        }
        std::vector<float> mid(5 * rank);
        cpu::LoraShrinkAvx512(x.data() + 2 * in, 5, in, dt, a.data(), rank, mid.data());
        for (int i = 0; i < 5 * rank; ++i) ASSERT_EQ(mid[i], all[2 * rank + i]) << i;
      }
    }
  }
}

TEST(LoraKernels, ExpandAddMatchesScalarAndIsRowInvariant) {
  if (cpu::DetectIsa() < cpu::Isa::kAvx512) GTEST_SKIP() << "no AVX-512";
  const int rank = 16;
  const int64_t out = 77, rows = 11, ldy = 80;
  auto t = Random(rows * rank, 70);
  auto bf = Random(rank * out, 71);
  auto y0 = Random(rows * ldy, 72);
  for (DType dt : {DType::kF32, DType::kF16, DType::kBF16}) {
    const auto bt = PackedBt(dt, bf, rank, out);
    for (auto [j0, j1] : std::vector<std::pair<int64_t, int64_t>>{{0, 77}, {16, 40}, {70, 77}}) {
      auto a = y0, b = y0;
      cpu::LoraExpandAddScalar(t.data(), rows, rank, dt, bt.data(), out, j0, j1, 0.5f, a.data(), ldy);
      cpu::LoraExpandAddAvx512(t.data(), rows, rank, dt, bt.data(), out, j0, j1, 0.5f, b.data(), ldy);
      for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], 1e-5f) << DTypeName(dt) << " " << i;
      // Row by row: the same bits as all rows in one call; columns outside [j0, j1) untouched.
      auto c = y0;
      for (int64_t r = 0; r < rows; ++r) {
        cpu::LoraExpandAddAvx512(t.data() + r * rank, 1, rank, dt, bt.data(), out, j0, j1, 0.5f,
                                 c.data() + r * ldy, ldy);
      }
      for (size_t i = 0; i < b.size(); ++i) ASSERT_EQ(b[i], c[i]) << i;
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t j = 0; j < ldy; ++j) {
          if (j < j0 || j >= j1) {
            ASSERT_EQ(b[r * ldy + j], y0[r * ldy + j]) << r << " " << j;
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace loom
