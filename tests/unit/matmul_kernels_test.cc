// Matmul kernels of every ISA level this CPU runs, against the scalar reference on random inputs.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "cpu/avx2_reduce.h"
#include "cpu/matmul_cpu.h"
#include "ops/basic_ops.h"
#include "ops/matmul.h"

namespace loom::cpu {
namespace {

// Every level up to what the CPU has: scalar, avx2, avx512, avx512bf16, amx.
std::vector<Isa> SupportedIsas() {
  std::vector<Isa> isas;
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512, Isa::kAvx512Bf16, Isa::kAmx}) {
    if (DetectIsa() >= isa) isas.push_back(isa);
  }
  return isas;
}

struct Problem {
  int64_t n, m, k;
  std::vector<float> x;        // [n, k]
  std::vector<uint8_t> w;      // [m, k] of dtype
  DType dtype;
};

Problem MakeProblem(int64_t n, int64_t m, int64_t k, DType dtype, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.5f, 1.0f);  // non-zero mean: catches dropped terms
  Problem p{n, m, k, {}, {}, dtype};
  p.x.resize(static_cast<size_t>(n * k));
  for (auto& v : p.x) v = dist(rng);
  std::vector<float> wf(static_cast<size_t>(m * k));
  for (auto& v : wf) v = dist(rng);
  p.w.resize(static_cast<size_t>(m * k) * DTypeSize(dtype));
  ConvertFromF32(dtype, wf.data(), p.w.data(), m * k);
  return p;
}

// Sums of k products of O(1) values: f32 reordering error grows ~sqrt(k)·2⁻²⁴·|terms|.
float Tolerance(int64_t k) { return 2e-5f * static_cast<float>(k); }

TEST(MatmulKernels, EveryIsaMatchesScalarForEveryWeightDtype) {
  const int64_t shapes[][3] = {{1, 37, 29}, {3, 9, 16}, {4, 12, 64}, {5, 13, 100}, {9, 21, 257},
                               {1, 64, 896}, {17, 7, 33}};
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (const auto& s : shapes) {
      Problem p = MakeProblem(s[0], s[1], s[2], dtype, static_cast<uint32_t>(s[0] * 1000 + s[2]));
      std::vector<float> ref(static_cast<size_t>(p.n * p.m));
      MatmulF32Scalar(dtype, p.x.data(), p.n, p.k, p.w.data(), 0, p.m, ref.data(), p.m);
      // The scalar kernel itself against a plain loop in double here (y = x·Wᵀ, W [m, k]): a
      // layout error in the production scalar path would otherwise be the reference's too.
      std::vector<float> wf(static_cast<size_t>(p.m * p.k));
      ConvertToF32(dtype, p.w.data(), wf.data(), p.m * p.k);
      for (int64_t i = 0; i < p.n; ++i) {
        for (int64_t j = 0; j < p.m; ++j) {
          double acc = 0;
          for (int64_t t = 0; t < p.k; ++t) {
            acc += static_cast<double>(p.x[static_cast<size_t>(i * p.k + t)]) *
                   wf[static_cast<size_t>(j * p.k + t)];
          }
          ASSERT_NEAR(ref[static_cast<size_t>(i * p.m + j)], acc, Tolerance(p.k)) << i << "," << j;
        }
      }
      for (Isa isa : SupportedIsas()) {
        SCOPED_TRACE(std::string(IsaName(isa)) + " " + DTypeName(dtype) + " n=" +
                     std::to_string(p.n) + " m=" + std::to_string(p.m) + " k=" + std::to_string(p.k));
        std::vector<float> y(static_cast<size_t>(p.n * p.m), -7.0f);
        // Two column ranges: a kernel must write exactly [j0, j1).
        const int64_t mid = p.m / 2 + 1;
        MatmulF32(isa, dtype, p.x.data(), p.n, p.k, p.w.data(), 0, mid, y.data(), p.m);
        MatmulF32(isa, dtype, p.x.data(), p.n, p.k, p.w.data(), mid, p.m, y.data(), p.m);
        for (size_t i = 0; i < y.size(); ++i) ASSERT_NEAR(y[i], ref[i], Tolerance(p.k)) << i;
      }
    }
  }
}

TEST(MatmulKernels, Bf16DotMatchesScalarWithAndWithoutSplit) {
  if (DetectIsa() < Isa::kAvx512Bf16) GTEST_SKIP() << "no AVX512_BF16 on this CPU";
  // Row counts around the 3-row (2 with split) tiles, column counts around the 8/4/1 tiles.
  for (const auto& s : std::vector<std::array<int64_t, 3>>{{1, 5, 31}, {4, 8, 64}, {7, 13, 100},
                                                         {16, 9, 896}, {2, 23, 96}, {6, 17, 33},
                                                         {11, 31, 257}}) {
    Problem p = MakeProblem(s[0], s[1], s[2], DType::kBF16, 7);
    const int64_t nk = p.n * p.k;
    std::vector<uint16_t> hi(static_cast<size_t>(nk)), lo(static_cast<size_t>(nk));
    for (int64_t i = 0; i < nk; ++i) {
      hi[static_cast<size_t>(i)] = F32ToBf16(p.x[static_cast<size_t>(i)]);
      lo[static_cast<size_t>(i)] =
          F32ToBf16(p.x[static_cast<size_t>(i)] - Bf16ToF32(hi[static_cast<size_t>(i)]));
    }
    const auto* w = reinterpret_cast<const uint16_t*>(p.w.data());
    for (bool split : {false, true}) {
      std::vector<float> ref(static_cast<size_t>(p.n * p.m)), y(ref.size(), -7.0f);
      MatmulBf16Scalar(hi.data(), split ? lo.data() : nullptr, p.n, p.k, w, 0, p.m, ref.data(), p.m);
      MatmulBf16Avx512(hi.data(), split ? lo.data() : nullptr, p.n, p.k, w, 0, p.m, y.data(), p.m);
      for (size_t i = 0; i < y.size(); ++i) ASSERT_NEAR(y[i], ref[i], Tolerance(p.k)) << i;
    }
  }
}

// Batch invariance at kernel level: a row's outputs are bit-identical whether it is computed
// alone or among n rows, for column ranges starting at multiples of 16 (as the op splits them).
TEST(MatmulKernels, Bf16DotRowIndependentOfRowCount) {
  if (DetectIsa() < Isa::kAvx512Bf16) GTEST_SKIP() << "no AVX512_BF16 on this CPU";
  Problem p = MakeProblem(13, 45, 300, DType::kBF16, 9);
  std::vector<uint16_t> hi(p.x.size()), lo(p.x.size());
  RoundToBf16(Isa::kScalar, p.x.data(), static_cast<int64_t>(p.x.size()), hi.data(), lo.data());
  const auto* w = reinterpret_cast<const uint16_t*>(p.w.data());
  // 13 rows: 3-row tiles and a 1-row tail; 2-8: one weight row at a time against all of them
  // (Columns; 2-row tiles with the split).
  for (bool split : {false, true})
    for (int64_t rows :
         {p.n, int64_t{8}, int64_t{7}, int64_t{5}, int64_t{4}, int64_t{3}, int64_t{2}}) {
      const uint16_t* l = split ? lo.data() : nullptr;
      std::vector<float> all(static_cast<size_t>(rows * p.m));
      MatmulBf16Avx512(hi.data(), l, rows, p.k, w, 0, 32, all.data(), p.m);
      MatmulBf16Avx512(hi.data(), l, rows, p.k, w, 32, p.m, all.data(), p.m);
      for (int64_t i = 0; i < rows; ++i) {
        std::vector<float> one(static_cast<size_t>(p.m));
        const int64_t off = i * p.k;
        MatmulBf16Avx512(hi.data() + off, split ? lo.data() + off : nullptr, 1, p.k, w, 0, 16,
                         one.data(), p.m);
        MatmulBf16Avx512(hi.data() + off, split ? lo.data() + off : nullptr, 1, p.k, w, 16, p.m,
                         one.data(), p.m);
        for (int64_t j = 0; j < p.m; ++j) {
          ASSERT_EQ(one[static_cast<size_t>(j)], all[static_cast<size_t>(i * p.m + j)])
              << "row " << i << " of " << rows << " col " << j << " split " << split;
        }
      }
    }
}

// The f32-activation kernels (every level, every weight dtype) give each row the same bits whether
// it runs alone or inside a batch of any size: the register tiles' shapes, the remainder tiles and
// the avx2 level's weight-group widths (4 for one or two rows, 3 from three) must not change any
// output's summation order.
TEST(MatmulKernels, F32KernelRowIndependentOfRowCount) {
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    Problem p = MakeProblem(13, 45, 300, dtype, 11);
    for (Isa isa : SupportedIsas()) {
      SCOPED_TRACE(std::string(IsaName(isa)) + " " + DTypeName(dtype));
      for (int64_t n : {2, 3, 4, 5, 7, 13}) {
        std::vector<float> all(static_cast<size_t>(n * p.m));
        MatmulF32(isa, dtype, p.x.data(), n, p.k, p.w.data(), 0, p.m, all.data(), p.m);
        for (int64_t i = 0; i < n; ++i) {
          std::vector<float> one(static_cast<size_t>(p.m));
          MatmulF32(isa, dtype, p.x.data() + i * p.k, 1, p.k, p.w.data(), 0, p.m, one.data(), p.m);
          for (int64_t j = 0; j < p.m; ++j) {
            ASSERT_EQ(one[static_cast<size_t>(j)], all[static_cast<size_t>(i * p.m + j)])
                << "n " << n << " row " << i << " col " << j;
          }
        }
      }
    }
  }
}

// The first n rows of p at `isa`, over columns [j0, jm) and [jm, j1) in two calls: each row equals
// the row run alone over [j0, j1) bit for bit and the scalar reference `ref` within tolerance;
// nothing outside [j0, j1) is written.
void ExpectRowsEqualARowAlone(const Problem& p, Isa isa, int64_t n, int64_t j0, int64_t jm,
                              int64_t j1, const std::vector<float>& ref) {
  std::vector<float> all(static_cast<size_t>(n * p.m), -7.0f);
  MatmulF32(isa, p.dtype, p.x.data(), n, p.k, p.w.data(), j0, jm, all.data(), p.m);
  MatmulF32(isa, p.dtype, p.x.data(), n, p.k, p.w.data(), jm, j1, all.data(), p.m);
  for (int64_t i = 0; i < n; ++i) {
    std::vector<float> one(static_cast<size_t>(p.m), -7.0f);
    MatmulF32(isa, p.dtype, p.x.data() + i * p.k, 1, p.k, p.w.data(), j0, j1, one.data(), p.m);
    for (int64_t j = 0; j < p.m; ++j) {
      const float got = all[static_cast<size_t>(i * p.m + j)];
      ASSERT_EQ(one[static_cast<size_t>(j)], got) << "n " << n << " row " << i << " col " << j;
      if (j < j0 || j >= j1) {
        ASSERT_EQ(got, -7.0f) << "col " << j << " outside [" << j0 << ", " << j1 << ") written";
      } else {
        ASSERT_NEAR(got, ref[static_cast<size_t>(i * p.m + j)], Tolerance(p.k)) << "col " << j;
      }
    }
  }
}

// A long k (5003, with a tail of 3) and column ranges that do not start at 0: every row of a batch
// equals the row run alone bit for bit (at avx2 one row uses 4-wide weight groups and several rows
// 3-wide groups, and 14 rows at this k are two activation blocks of 12 and 2), and the scalar
// reference within tolerance; the outputs outside [j0, j1) stay untouched.
TEST(MatmulKernels, F32KernelRowIndependentAcrossBlocks) {
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    Problem p = MakeProblem(14, 40, 5003, dtype, 13);
    std::vector<float> ref(static_cast<size_t>(p.n * p.m));
    MatmulF32Scalar(dtype, p.x.data(), p.n, p.k, p.w.data(), 0, p.m, ref.data(), p.m);
    for (Isa isa : SupportedIsas()) {
      SCOPED_TRACE(std::string(IsaName(isa)) + " " + DTypeName(dtype));
      for (int64_t n : {2, 5, 14}) ExpectRowsEqualARowAlone(p, isa, n, 3, 17, 39, ref);
    }
  }
}

// Prefill-sized calls (more than 16 rows: at avx2, k ≤ 1024 takes groups of 4 weight rows widened
// once and 3 × 4 tiles, a longer k the 4 × 3 tiles): each row equals the row run alone bit for bit,
// for weight groups that do not fill 4 (45 − 3 = 42 columns in two ranges), a tail past k/8·8 and
// k at and past the 1024 boundary; within tolerance of the scalar reference; nothing outside
// [j0, j1) written.
TEST(MatmulKernels, F32KernelPrefillRowsEqualARowAlone) {
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (int64_t k : {300, 1024, 1031}) {
      Problem p = MakeProblem(37, 45, k, dtype, static_cast<uint32_t>(k));
      std::vector<float> ref(static_cast<size_t>(p.n * p.m));
      MatmulF32Scalar(dtype, p.x.data(), p.n, p.k, p.w.data(), 0, p.m, ref.data(), p.m);
      for (Isa isa : SupportedIsas()) {
        SCOPED_TRACE(std::string(IsaName(isa)) + " " + DTypeName(dtype) + " k=" + std::to_string(k));
        for (int64_t n : {17, 37}) ExpectRowsEqualARowAlone(p, isa, n, 3, 22, 45, ref);
      }
    }
  }
}

// Sum8x4 (the avx2 tiles' batched reduction) gives each vector's Sum8 bit for bit. Lanes of mixed
// sign and magnitude (2^-30 .. 2^30) make every other association order round differently.
__attribute__((target("avx2"))) void ExpectSum8x4EqualsSum8(std::mt19937& rng) {
  std::normal_distribution<float> dist(0, 1);
  alignas(32) float v[4][8];
  for (auto& row : v) {
    for (float& f : row) f = dist(rng) * std::ldexp(1.0f, static_cast<int>(rng() % 61) - 30);
  }
  __m256 r[4];
  for (int i = 0; i < 4; ++i) r[i] = _mm256_load_ps(v[i]);
  alignas(16) float got[4];
  _mm_store_ps(got, Sum8x4(r[0], r[1], r[2], r[3]));
  for (int i = 0; i < 4; ++i) ASSERT_EQ(got[i], Sum8(r[i])) << "vector " << i;
}

TEST(MatmulKernels, Sum8x4EqualsFourSum8BitForBit) {
  if (DetectIsa() < Isa::kAvx2) GTEST_SKIP() << "no AVX2";
  std::mt19937 rng(5);
  for (int t = 0; t < 20000; ++t) {
    ExpectSum8x4EqualsSum8(rng);
    if (HasFatalFailure()) return;
  }
}

// The vectorized rounding equals F32ToBf16 bit for bit: ties to even, NaN, ±inf, denormals.
TEST(MatmulKernels, RoundToBf16MatchesScalarBitForBit) {
  std::vector<float> x;
  std::mt19937 rng(3);
  std::normal_distribution<float> dist(0, 1);
  for (int i = 0; i < 1000; ++i) x.push_back(dist(rng) * std::ldexp(1.0f, static_cast<int>(rng() % 60) - 30));
  for (uint32_t bits : {0x3f808000u, 0x3f818000u, 0x7fc00000u, 0x7f800001u, 0xff800000u, 0x7f800000u,
                        0x00000001u, 0x807fffffu, 0x7f7fffffu, 0x00000000u, 0x80000000u}) {
    float f;
    std::memcpy(&f, &bits, 4);
    x.push_back(f);
  }
  const int64_t count = static_cast<int64_t>(x.size());
  std::vector<uint16_t> hi0(x.size()), lo0(x.size()), hi1(x.size()), lo1(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    hi0[i] = F32ToBf16(x[i]);
    lo0[i] = F32ToBf16(x[i] - Bf16ToF32(hi0[i]));
  }
  for (Isa isa : SupportedIsas()) {
    RoundToBf16(isa, x.data(), count, hi1.data(), lo1.data());
    for (size_t i = 0; i < x.size(); ++i) {
      ASSERT_EQ(hi1[i], hi0[i]) << IsaName(isa) << " " << i;
      if (!std::isnan(x[i])) {
        ASSERT_EQ(lo1[i], lo0[i]) << IsaName(isa) << " " << i;
      }
    }
  }
}

// The split form must be far closer to the exact f32 product than a single bf16 rounding.
TEST(MatmulOp, SplitBf16DotIsNearlyExact) {
  if (ActiveIsa() < Isa::kAvx512Bf16) GTEST_SKIP() << "no bf16 dot product at this level (LOOM_ISA)";
  Problem p = MakeProblem(32, 40, 512, DType::kBF16, 11);
  Tensor w{DType::kBF16, {p.m, p.k}, p.w.data()};
  std::vector<float> exact(static_cast<size_t>(p.n * p.m));
  MatmulF32Scalar(DType::kBF16, p.x.data(), p.n, p.k, p.w.data(), 0, p.m, exact.data(), p.m);
  MatmulOptions saved = GlobalMatmulOptions();
  auto max_err = [&](bool split) {
    GlobalMatmulOptions().bf16_dot_min_rows = 1;
    GlobalMatmulOptions().bf16_split = split;
    std::vector<float> y(exact.size());
    Matmul(p.x.data(), p.n, w, y.data());
    float e = 0;
    for (size_t i = 0; i < y.size(); ++i) e = std::max(e, std::fabs(y[i] - exact[i]));
    return e;
  };
  const float single = max_err(false);
  const float split = max_err(true);
  GlobalMatmulOptions() = saved;
  EXPECT_LT(split, 2e-3f);
  EXPECT_GT(single, 20 * split);
}

// The op at every active level (LOOM_ISA's cap): bf16 weights take the f32-widening kernel
// below avx512bf16, the dot product at avx512bf16 and AMX tiles at amx; each near the exact
// product (exact hi+lo split) and, rounded once, within the bf16 bound of the test below.
TEST(MatmulOp, EveryActiveLevelMatchesScalar) {
  Problem p = MakeProblem(33, 70, 128, DType::kBF16, 5);
  Tensor w{DType::kBF16, {p.m, p.k}, p.w.data()};
  std::vector<float> ref(static_cast<size_t>(p.n * p.m));
  MatmulF32Scalar(DType::kBF16, p.x.data(), p.n, p.k, p.w.data(), 0, p.m, ref.data(), p.m);
  const MatmulOptions saved = GlobalMatmulOptions();
  const Isa active = ActiveIsa();
  for (Isa isa : SupportedIsas()) {
    SetActiveIsa(isa);
    GlobalMatmulOptions().bf16_split = true;
    std::vector<float> y(ref.size(), -7.0f);
    Matmul(p.x.data(), p.n, w, y.data());
    for (size_t i = 0; i < y.size(); ++i) ASSERT_NEAR(y[i], ref[i], Tolerance(p.k)) << IsaName(isa) << " " << i;
  }
  SetActiveIsa(active);
  GlobalMatmulOptions() = saved;
}

TEST(CpuFeatures, LoomIsaCapParsesEveryLevelCaseInsensitively) {
  Isa out = Isa::kScalar;
  ASSERT_TRUE(ParseIsaCap("AVX512BF16", Isa::kAmx, &out));
  EXPECT_EQ(out, Isa::kAvx512Bf16);
  ASSERT_TRUE(ParseIsaCap("avx512", Isa::kAmx, &out));
  EXPECT_EQ(out, Isa::kAvx512);
  ASSERT_TRUE(ParseIsaCap("Amx", Isa::kAvx512Bf16, &out));
  EXPECT_EQ(out, Isa::kAvx512Bf16) << "a cap above the hardware keeps the hardware level";
  ASSERT_TRUE(ParseIsaCap("scalar", Isa::kAvx2, &out));
  EXPECT_EQ(out, Isa::kScalar);
  out = Isa::kAvx2;
  EXPECT_FALSE(ParseIsaCap("avx512_bf16", Isa::kAmx, &out));
  EXPECT_FALSE(ParseIsaCap("", Isa::kAmx, &out));
  EXPECT_EQ(out, Isa::kAvx2) << "an unknown value leaves the level untouched";
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512, Isa::kAvx512Bf16, Isa::kAmx}) {
    ASSERT_TRUE(ParseIsaCap(IsaName(isa), Isa::kAmx, &out));
    EXPECT_EQ(out, isa);
  }
}

TEST(MatmulOp, ThreadedOpEqualsSingleKernelCall) {
  Problem p = MakeProblem(6, 203, 96, DType::kBF16, 3);
  Tensor w{DType::kBF16, {p.m, p.k}, p.w.data()};
  std::vector<float> ref(static_cast<size_t>(p.n * p.m)), y(ref.size());
  MatmulF32Scalar(DType::kBF16, p.x.data(), p.n, p.k, p.w.data(), 0, p.m, ref.data(), p.m);
  Matmul(p.x.data(), p.n, w, y.data());
  for (size_t i = 0; i < y.size(); ++i) ASSERT_NEAR(y[i], ref[i], Tolerance(p.k));
}

}  // namespace
}  // namespace loom::cpu

namespace loom::cpu {
namespace {

// AMX tiles: odd row counts (partial activation groups, weight tails < 16 and < 32 rows).
TEST(MatmulKernels, AmxMatchesScalarWithAndWithoutSplit) {
  if (!AmxAvailable()) GTEST_SKIP() << "no AMX-BF16 on this CPU";
  for (const auto& s : std::vector<std::array<int64_t, 3>>{{1, 5, 32}, {16, 16, 64}, {17, 40, 96},
                                                         {35, 77, 128}, {64, 33, 896}}) {
    Problem p = MakeProblem(s[0], s[1], s[2], DType::kBF16, 21);
    const auto* w = reinterpret_cast<const uint16_t*>(p.w.data());
    for (bool split : {false, true}) {
      SCOPED_TRACE("n=" + std::to_string(p.n) + " m=" + std::to_string(p.m) +
                   " k=" + std::to_string(p.k) + (split ? " split" : ""));
      std::vector<uint16_t> packed(PackedActivationsAmxSize(p.n, p.k, split));
      PackActivationsAmx(p.x.data(), p.n, p.k, split, packed.data());
      std::vector<uint16_t> hi(static_cast<size_t>(p.n * p.k)), lo(hi.size());
      for (size_t i = 0; i < hi.size(); ++i) {
        hi[i] = F32ToBf16(p.x[i]);
        lo[i] = F32ToBf16(p.x[i] - Bf16ToF32(hi[i]));
      }
      std::vector<float> ref(static_cast<size_t>(p.n * p.m)), y(ref.size(), -7.0f);
      MatmulBf16Scalar(hi.data(), split ? lo.data() : nullptr, p.n, p.k, w, 0, p.m, ref.data(), p.m);
      const int64_t mid = std::min<int64_t>(p.m, 19);
      MatmulBf16Amx(packed.data(), split, p.n, p.k, w, 0, mid, y.data(), p.m);
      MatmulBf16Amx(packed.data(), split, p.n, p.k, w, mid, p.m, y.data(), p.m);
      for (size_t i = 0; i < y.size(); ++i) ASSERT_NEAR(y[i], ref[i], Tolerance(p.k)) << i;
    }
  }
}

}  // namespace
}  // namespace loom::cpu

namespace loom::cpu {
namespace {

// Weights repacked as AMX tiles (what loom serve runs on an AMX CPU) give the row-major path's
// bits (that path is held to the scalar reference by AmxMatchesScalarWithAndWithoutSplit) for
// every row count, ragged row counts (a zero-padded last panel) and both roundings, and the
// packed panels hold each weight row's 64-byte pieces where the kernel reads them.
TEST(MatmulOp, AmxPackedWeightsGiveTheRowMajorBits) {
  if (!AmxAvailable() || ActiveIsa() != Isa::kAmx) GTEST_SKIP() << "no AMX-BF16 path here";
  const MatmulOptions saved = GlobalMatmulOptions();
  GlobalMatmulOptions().batch_invariant = true;
  // The last two cross the kernel's chunks of ~1 MiB of weight rows (128 rows at k = 4096):
  // row-major weights always go chunk by chunk, packed ones once the activations pass 1 MiB
  // (150 rows); the 300 rows end in a 12-row tail.
  const int64_t shapes[][3] = {{1, 37, 64},   {5, 100, 96},   {16, 64, 896},   {40, 130, 256},
                               {1, 896, 896}, {33, 300, 128}, {40, 300, 4096}, {150, 300, 4096}};
  for (const auto& s : shapes) {
    const Problem p = MakeProblem(s[0], s[1], s[2], DType::kBF16, 7 + static_cast<uint32_t>(s[1]));
    const Tensor w{DType::kBF16, {p.m, p.k}, const_cast<uint8_t*>(p.w.data())};
    ASSERT_TRUE(AmxPackable(w));
    auto packed = PackWeightForAmx(w, "test");
    ASSERT_TRUE(packed.ok()) << packed.status().ToString();
    const AmxPackedWeight& pw = **packed;
    const auto* wd = reinterpret_cast<const uint16_t*>(p.w.data());
    for (int64_t row : {int64_t{0}, p.m / 2, p.m - 1}) {
      for (int64_t t = 0; t < p.k / 32; ++t) {
        const uint16_t* at =
            pw.panels.data() + ((row / 16) * (p.k / 32) + t) * 512 + (row % 16) * 32;
        ASSERT_EQ(std::memcmp(at, wd + row * p.k + t * 32, 64), 0)
            << "row " << row << " tile " << t;
      }
    }
    if (p.m % 16 != 0) {  // the rows past m in the last panel are zeros
      const uint16_t* last = pw.panels.data() + ((p.m / 16) * (p.k / 32)) * 512;
      for (int64_t r = p.m % 16; r < 16; ++r) ASSERT_EQ(last[r * 32], 0) << r;
    }
    for (bool split : {false, true}) {
      GlobalMatmulOptions().bf16_split = split;
      std::vector<float> row_major(static_cast<size_t>(p.n * p.m), -1.0f),
          tiles(row_major.size(), -2.0f);
      Matmul(p.x.data(), p.n, w, row_major.data());
      Matmul(p.x.data(), p.n, w, tiles.data(), nullptr, &pw);
      double sum = 0;
      for (size_t i = 0; i < tiles.size(); ++i) {
        ASSERT_EQ(tiles[i], row_major[i])
            << "n " << p.n << " m " << p.m << " k " << p.k << " at " << i;
        sum += std::fabs(tiles[i]);
      }
      EXPECT_GT(sum, 0.0);  // not all zeros
      // A row alone (one activation group: a single pass, whatever the chunking) gives the
      // bits it got among the others.
      for (int64_t r : {int64_t{0}, p.n / 2, p.n - 1}) {
        std::vector<float> alone(static_cast<size_t>(p.m), -3.0f);
        Matmul(p.x.data() + r * p.k, 1, w, alone.data(), nullptr, &pw);
        for (int64_t j = 0; j < p.m; ++j) {
          ASSERT_EQ(alone[static_cast<size_t>(j)], tiles[static_cast<size_t>(r * p.m + j)])
              << "n " << p.n << " m " << p.m << " k " << p.k << " row " << r << " col " << j;
        }
      }
    }
  }
  GlobalMatmulOptions() = saved;
}

// The one-pass paths loom serve takes for base rows give the bits of the per-projection path:
// gate and up with SiLU·mul on the tiles (MatmulSiluMul) against two Matmuls then
// SiluMulInPlace, and q/k/v with biases (MatmulShared) against a Matmul each then the bias add.
// Shapes: one decode row, a tail group, and activations past the kernel's 1 MiB chunk (k 4096).
TEST(MatmulOp, OnePassGateUpAndQkvGiveThePerProjectionBits) {
  if (!AmxAvailable() || ActiveIsa() != Isa::kAmx) GTEST_SKIP() << "no AMX-BF16 path here";
  const MatmulOptions saved = GlobalMatmulOptions();
  GlobalMatmulOptions().batch_invariant = true;
  const int64_t shapes[][3] = {{1, 48, 64}, {17, 96, 256}, {40, 48, 4096}, {150, 64, 4096}};
  for (bool split : {false, true})
    for (const auto& sh : shapes) {
      GlobalMatmulOptions().bf16_split = split;
      const int64_t n = sh[0], m = sh[1], k = sh[2];
      Problem gp = MakeProblem(n, m, k, DType::kBF16, 11 + static_cast<uint32_t>(k));
      const Problem upp = MakeProblem(n, m, k, DType::kBF16, 12 + static_cast<uint32_t>(k));
      for (float& v : gp.x) v *= 1.0f / std::sqrt(static_cast<float>(k));  // SiLU not saturated
      const Tensor gw{DType::kBF16, {m, k}, gp.w.data()},
          uw{DType::kBF16, {m, k}, const_cast<uint8_t*>(upp.w.data())};
      auto ga = PackWeightForAmx(gw, "gate"), ua = PackWeightForAmx(uw, "up");
      ASSERT_TRUE(ga.ok() && ua.ok());
      ASSERT_TRUE(SiluMulFusable(gw, ga->get(), uw, ua->get(), n));
      std::vector<float> g(static_cast<size_t>(n * m), -1.0f), u(g.size(), -1.0f),
          y(g.size(), -2.0f);
      Matmul(gp.x.data(), n, gw, g.data(), nullptr, ga->get());
      Matmul(gp.x.data(), n, uw, u.data(), nullptr, ua->get());
      SiluMulInPlace(g.data(), u.data(), n * m);
      MatmulSiluMul(gp.x.data(), n, **ga, **ua, y.data());
      int64_t nonzero = 0;
      for (size_t i = 0; i < g.size(); ++i) {
        ASSERT_EQ(y[i], g[i]) << "gate/up n " << n << " m " << m << " k " << k << " at " << i;
        nonzero += y[i] != 0.0f;
      }
      EXPECT_GT(nonzero, static_cast<int64_t>(g.size()) / 2);
      // q/k/v: the gate weights as q, up as k (with a bias), the first 48 rows of up as v.
      const int64_t mv = 48;
      const Tensor vw{DType::kBF16, {mv, k}, const_cast<uint8_t*>(upp.w.data())};
      auto va = PackWeightForAmx(vw, "v");
      ASSERT_TRUE(va.ok());
      std::vector<float> bias(static_cast<size_t>(m));
      for (size_t j = 0; j < bias.size(); ++j) bias[j] = 0.25f * static_cast<float>(j % 7) - 0.5f;
      std::vector<float> q1(g.size(), -1.0f), k1(g.size(), -1.0f),
          v1(static_cast<size_t>(n * mv), -1.0f);
      std::vector<float> q2(q1.size(), -2.0f), k2(k1.size(), -2.0f), v2(v1.size(), -2.0f);
      Matmul(gp.x.data(), n, gw, q1.data(), nullptr, ga->get());
      Matmul(gp.x.data(), n, uw, k1.data(), nullptr, ua->get());
      for (int64_t r = 0; r < n; ++r) {
        for (int64_t j = 0; j < m; ++j)
          k1[static_cast<size_t>(r * m + j)] += bias[static_cast<size_t>(j)];
      }
      Matmul(gp.x.data(), n, vw, v1.data(), nullptr, va->get());
      const std::vector<MatmulPart> parts = {{&gw, ga->get(), nullptr, q2.data()},
                                             {&uw, ua->get(), bias.data(), k2.data()},
                                             {&vw, va->get(), nullptr, v2.data()}};
      ASSERT_TRUE(MatmulSharedFusable(parts, n));
      MatmulShared(gp.x.data(), n, parts);
      ASSERT_EQ(q1, q2) << "q n " << n << " k " << k;
      ASSERT_EQ(k1, k2) << "k n " << n << " k " << k;
      ASSERT_EQ(v1, v2) << "v n " << n << " k " << k;
    }
  GlobalMatmulOptions() = saved;
}

// The packed B-tile layout, element by element: tile (g, s) row r, dword column c holds the
// bf16 pair x[16g + c][32s + 2r, +1] (rounded once; the residuals the same way after them), and
// zeros for the rows a partial group lacks. Full groups are packed by an in-register transpose,
// partial ones by a scatter: both are checked (n = 16, 35).
TEST(MatmulKernels, AmxPackedActivationLayout) {
  if (!AmxAvailable()) GTEST_SKIP() << "no AMX-BF16 on this CPU";
  for (int64_t n : {16, 35}) {
    const int64_t k = 96;
    Problem p = MakeProblem(n, 1, k, DType::kBF16, 5);
    for (bool split : {false, true}) {
      std::vector<uint16_t> packed(PackedActivationsAmxSize(n, k, split), 0xFFFF);
      PackActivationsAmx(p.x.data(), n, k, split, packed.data());
      const int64_t groups = (n + 15) / 16, steps = k / 32;
      // Group by group, last first (as the pool may run them): the same buffer.
      std::vector<uint16_t> by_group(packed.size(), 0xFFFF);
      for (int64_t g = groups - 1; g >= 0; --g) {
        PackActivationsAmxGroups(p.x.data(), n, k, split, by_group.data(), g, g + 1);
      }
      ASSERT_EQ(by_group, packed) << "n=" << n;
      const size_t lo_offset = PackedActivationsAmxSize(n, k, false);
      for (int64_t g = 0; g < groups; ++g) {
        for (int64_t s = 0; s < steps; ++s) {
          for (int64_t r = 0; r < 16; ++r) {
            for (int64_t c = 0; c < 16; ++c) {
              for (int64_t e = 0; e < 2; ++e) {
                const int64_t row = 16 * g + c, col = 32 * s + 2 * r + e;
                const size_t at = static_cast<size_t>((g * steps + s) * 512 + r * 32 + c * 2 + e);
                const float v = row < n ? p.x[static_cast<size_t>(row * k + col)] : 0.0f;
                const uint16_t hi = F32ToBf16(v);
                ASSERT_EQ(packed[at], hi)
                    << "n=" << n << " g=" << g << " s=" << s << " r=" << r << " c=" << c;
                if (split) {
                  ASSERT_EQ(packed[lo_offset + at], F32ToBf16(v - Bf16ToF32(hi))) << "lo n=" << n;
                }
              }
            }
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace loom::cpu
