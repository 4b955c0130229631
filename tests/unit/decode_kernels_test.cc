// Decode-shape kernels against their references bit for bit: the LoRA expand-add tiles for 1..9 rows, the one-row AMX shrink against a packed AMX group, and the AVX-512 int8 activation quantizer against the scalar one.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <utility>
#include <vector>

#include "cpu/cpu_features.h"
#include "cpu/int8_cpu.h"
#include "cpu/lora_cpu.h"
#include "kernel_test_util.h"
#include "cpu/matmul_cpu.h"
#include "tensor/dtype.h"

namespace loom::cpu {
namespace {

std::vector<float> Random(size_t n, uint32_t seed, float mean = 0.3f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(mean, 1.0f);  // non-zero mean: a dropped term shows
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

// Every row count 1..9 (the tiles 1×8, 2×4, 3×4, 4×4, 5..8×2 and 8 + 1) over 300 columns
// (column groups of up to 128, masked tails): each row's bits are those of the row alone and of
// the AVX2 kernel (the same fma chain), and within 1e-4 of the scalar reference.
TEST(DecodeKernels, ExpandAddTilesAreRowInvariantAndMatchAvx2) {
  if (DetectIsa() < Isa::kAvx512) GTEST_SKIP() << "no AVX-512";
  const int rank = 16;
  const int64_t out = 300, ldy = 304;
  for (int64_t rows = 1; rows <= 9; ++rows) {
    auto t = Random(static_cast<size_t>(rows * rank), 10 + static_cast<uint32_t>(rows));
    auto bf = Random(static_cast<size_t>(rank * out), 20);
    auto y0 = Random(static_cast<size_t>(rows * ldy), 30);
    for (DType dt : {DType::kF32, DType::kF16, DType::kBF16}) {
      const auto bt = PackedBt(dt, bf, rank, out);
      for (auto [j0, j1] : std::vector<std::pair<int64_t, int64_t>>{{0, 300}, {5, 290}, {64, 128}}) {
        SCOPED_TRACE(std::to_string(rows) + " rows, " + DTypeName(dt) + ", cols " +
                     std::to_string(j0) + ".." + std::to_string(j1));
        auto all = y0, ref = y0, alone = y0, avx2 = y0;
        LoraExpandAddAvx512(t.data(), rows, rank, dt, bt.data(), out, j0, j1, 0.5f, all.data(), ldy);
        LoraExpandAddScalar(t.data(), rows, rank, dt, bt.data(), out, j0, j1, 0.5f, ref.data(), ldy);
        LoraExpandAddAvx2(t.data(), rows, rank, dt, bt.data(), out, j0, j1, 0.5f, avx2.data(), ldy);
        for (int64_t r = 0; r < rows; ++r) {
          LoraExpandAddAvx512(t.data() + r * rank, 1, rank, dt, bt.data(), out, j0, j1, 0.5f,
                              alone.data() + r * ldy, ldy);
        }
        for (size_t i = 0; i < all.size(); ++i) {
          ASSERT_EQ(all[i], alone[i]) << i;
          ASSERT_EQ(all[i], avx2[i]) << i;
          ASSERT_NEAR(all[i], ref[i], 1e-4f) << i;
          const int64_t j = static_cast<int64_t>(i) % ldy;
          if (j < j0 || j >= j1) {
            ASSERT_EQ(all[i], y0[i]) << "column " << j << " outside the block";
          }
        }
      }
    }
  }
}

// The one-row AMX product (the LoRA shrink at decode) gives the bits the packed kernel gives
// that row wherever it sits in a group, split or not, with full and tail weight panels, and
// cut by rank into pieces of fewer than 16 weight rows.
TEST(DecodeKernels, AmxRowMatchesThePackedGroupBitForBit) {
  if (DetectIsa() < Isa::kAmx || !AmxAvailable()) GTEST_SKIP() << "no AMX here";
  for (int64_t k : {int64_t{32}, int64_t{96}, int64_t{896}}) {
    for (int64_t rank : {int64_t{8}, int64_t{16}, int64_t{40}}) {
      const int64_t n = 5;
      auto x = Random(static_cast<size_t>(n * k), 40 + static_cast<uint32_t>(k));
      auto wf = Random(static_cast<size_t>(rank * k), 50 + static_cast<uint32_t>(rank), 0.0f);
      std::vector<uint16_t> w(wf.size());
      for (size_t i = 0; i < w.size(); ++i) w[i] = F32ToBf16(wf[i]);
      for (bool split : {false, true}) {
        SCOPED_TRACE("k " + std::to_string(k) + " rank " + std::to_string(rank) + (split ? " split" : ""));
        std::vector<uint16_t> packed(PackedActivationsAmxSize(n, k, split));
        PackActivationsAmx(x.data(), n, k, split, packed.data());
        std::vector<float> group(static_cast<size_t>(n * rank));
        MatmulBf16Amx(packed.data(), split, n, k, w.data(), 0, rank, group.data(), rank);
        double max_err = 0;
        for (int64_t r = 0; r < n; ++r) {
          std::vector<float> row(static_cast<size_t>(rank), -1.0f);
          MatmulBf16AmxRow(x.data() + r * k, split, k, w.data(), 0, rank, row.data());
          for (int64_t j = 0; j < rank; ++j) {
            ASSERT_EQ(row[j], group[r * rank + j]) << "row " << r << " col " << j;
            double exact = 0;
            for (int64_t i = 0; i < k; ++i) exact += double(x[r * k + i]) * Bf16ToF32(w[j * k + i]);
            max_err = std::max(max_err, std::fabs(exact - row[j]) / std::sqrt(double(k)));
          }
        }
        // Not a zero or a copy: within bf16 rounding of the f64 product.
        EXPECT_LT(max_err, split ? 1e-4 : 2e-2);
        // A column block that starts inside the panel: the same bits.
        if (rank > 16) {
          std::vector<float> part(static_cast<size_t>(rank), 0.0f);
          MatmulBf16AmxRow(x.data() + 2 * k, split, k, w.data(), 16, rank, part.data());
          for (int64_t j = 16; j < rank; ++j) ASSERT_EQ(part[j], group[2 * rank + j]) << j;
        }
        // Rank cuts (LoraShrinkPlan's, one per worker): each piece runs as tiles of fewer
        // than 16 weight rows, and every piece gives the group kernel's bits.
        for (int64_t cut : {int64_t{4}, int64_t{8}, int64_t{12}, int64_t{20}}) {
          if (cut >= rank) continue;
          std::vector<float> pieces(static_cast<size_t>(rank), -1.0f);
          MatmulBf16AmxRow(x.data() + 3 * k, split, k, w.data(), 0, cut, pieces.data());
          MatmulBf16AmxRow(x.data() + 3 * k, split, k, w.data(), cut, rank, pieces.data());
          for (int64_t j = 0; j < rank; ++j) {
            ASSERT_EQ(pieces[j], group[3 * rank + j]) << "cut " << cut << " col " << j;
          }
        }
      }
    }
  }
}

// The AVX-512 and AVX2 activation quantizers give the scalar one's bits: scales, round half to
// even, clamping, tails, zero and inf rows, and a NaN element (quantized to 0, the row's scale
// from the other elements).
void ExpectQuantizerMatchesScalar(void (*quantize)(const float*, int64_t, int64_t, int8_t*, float*)) {
  for (int64_t k : {int64_t{1}, int64_t{15}, int64_t{16}, int64_t{17}, int64_t{31}, int64_t{33}, int64_t{63}, int64_t{100}, int64_t{896}, int64_t{4864}}) {
    const int64_t n = 6;
    auto x = Random(static_cast<size_t>(n * k), 60 + static_cast<uint32_t>(k));
    for (int64_t i = 0; i < k; ++i) x[static_cast<size_t>(2 * k + i)] = 0.0f;  // zero row
    x[static_cast<size_t>(3 * k + k / 2)] = std::numeric_limits<float>::infinity();
    if (k > 1) x[static_cast<size_t>(4 * k + k - 1)] = std::numeric_limits<float>::quiet_NaN();
    // Row 5: exact halves after scaling (max 127 → scale 1).
    for (int64_t i = 0; i < k; ++i) x[static_cast<size_t>(5 * k + i)] = static_cast<float>(i % 9) - 4.5f;
    x[static_cast<size_t>(5 * k)] = 127.0f;
    std::vector<int8_t> qs(static_cast<size_t>(n * k)), qv(qs.size(), 99);
    std::vector<float> ss(static_cast<size_t>(n)), sv(ss.size(), -1.0f);
    QuantizeRowsInt8Scalar(x.data(), n, k, qs.data(), ss.data());
    quantize(x.data(), n, k, qv.data(), sv.data());
    for (int64_t r = 0; r < n; ++r) {
      ASSERT_EQ(std::memcmp(&ss[r], &sv[r], sizeof(float)), 0) << "scale of row " << r << " k " << k;
    }
    for (size_t i = 0; i < qs.size(); ++i) ASSERT_EQ(qs[i], qv[i]) << "k " << k << " element " << i;
    if (k > 1) {
      EXPECT_EQ(qs[static_cast<size_t>(4 * k + k - 1)], 0);
    }
    if (k > 2) {
      EXPECT_EQ(qs[static_cast<size_t>(5 * k + 1)], -4);  // −3.5 → −4 (half to even)
    }
  }
}

TEST(DecodeKernels, Int8QuantizerAvx512MatchesScalar) {
  if (DetectIsa() < Isa::kAvx512) GTEST_SKIP() << "no AVX-512";
  ExpectQuantizerMatchesScalar(QuantizeRowsInt8Avx512);
}

TEST(DecodeKernels, Int8QuantizerAvx2MatchesScalar) {
  if (DetectIsa() < Isa::kAvx2) GTEST_SKIP() << "no AVX2";
  ExpectQuantizerMatchesScalar(QuantizeRowsInt8Avx2);
}

}  // namespace
}  // namespace loom::cpu
