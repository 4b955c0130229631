// The AVX2 LoRA kernels (shrink, expand, expand-add) against the scalar reference on random inputs,
// and row invariance bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <utility>
#include <vector>

#include "cpu/cpu_features.h"
#include "cpu/lora_cpu.h"
#include "kernel_test_util.h"
#include "tensor/dtype.h"

namespace loom::cpu {
namespace {

std::vector<uint8_t> As(DType dt, const std::vector<float>& f) {
  std::vector<uint8_t> out(f.size() * DTypeSize(dt));
  ConvertFromF32(dt, f.data(), out.data(), static_cast<int64_t>(f.size()));
  return out;
}

class LoraAvx2 : public ::testing::Test {
 protected:
  void SetUp() override {
    if (DetectIsa() < Isa::kAvx2) GTEST_SKIP() << "no AVX2 on this CPU";
  }
};

TEST_F(LoraAvx2, ShrinkMatchesScalarAndEachRowAloneBitForBit) {
  for (int rank : {16, 7, 6, 5, 1}) {  // tiles of 4 ranks, then 3, 2, 1
    for (int64_t in : {896, 77, 16, 3}) {
      const int64_t rows = 10;
      auto x = RandomNonZeroMean(static_cast<size_t>(rows * in), 60);
      auto af = RandomNonZeroMean(static_cast<size_t>(rank * in), 61);
      for (DType dt : {DType::kF32, DType::kF16, DType::kBF16}) {
        SCOPED_TRACE(std::string(DTypeName(dt)) + " rank " + std::to_string(rank) + " in " +
                     std::to_string(in));
        auto a = As(dt, af);
        std::vector<float> ref(static_cast<size_t>(rows * rank)), all(ref.size());
        LoraShrinkScalar(x.data(), rows, in, dt, a.data(), rank, ref.data());
        LoraShrinkAvx2(x.data(), rows, in, dt, a.data(), rank, all.data());
        for (size_t i = 0; i < ref.size(); ++i) ASSERT_NEAR(ref[i], all[i], 2e-5f * in) << i;
        for (int64_t r = 0; r < rows; ++r) {  // each row alone: the same bits
          std::vector<float> one(static_cast<size_t>(rank));
          LoraShrinkAvx2(x.data() + r * in, 1, in, dt, a.data(), rank, one.data());
          for (int k = 0; k < rank; ++k)
            ASSERT_EQ(one[k], all[r * rank + k]) << "row " << r << " rank " << k;
        }
        std::vector<float> mid(static_cast<size_t>(5 * rank));  // rows 2..6 as one call
        LoraShrinkAvx2(x.data() + 2 * in, 5, in, dt, a.data(), rank, mid.data());
        for (int i = 0; i < 5 * rank; ++i) ASSERT_EQ(mid[i], all[2 * rank + i]) << i;
      }
    }
  }
}

// The expand's contract, element by element: acc = fma(t[r, k], Bᵀ[k, j], acc) for k in order
// from 0, then y = fma(scale, acc, y) (the AVX-512 kernel's arithmetic).
float ExpandElement(const float* t, int rank, const std::vector<float>& b, int64_t out, int64_t j) {
  float acc = 0;
  for (int k = 0; k < rank; ++k) acc = std::fma(t[k], b[static_cast<size_t>(k * out + j)], acc);
  return acc;
}

// Rows 11 and 6 (tiles of 4 rows, then 3 or 2) and 3, 2, 1 (decode calls alone, with the B
// prefetch), 77 and 211 output columns, column ranges cut into 24-, 8- and 1-column pieces,
// ranks 16 and 5.
TEST_F(LoraAvx2, ExpandAndExpandAddMatchScalarAndEachRowAloneBitForBit) {
  for (int rank : {16, 5}) {
    for (int64_t rows : {11, 6, 3, 2, 1}) {
      for (int64_t out : {77, 211}) {
        const int64_t ldy = out + 3;
        using Ranges = std::vector<std::pair<int64_t, int64_t>>;
        const Ranges ranges = out == 77 ? Ranges{{0, 77}, {16, 40}, {70, 77}, {3, 12}, {0, 56}, {5, 77}}
                                        : Ranges{{0, 211}, {16, 112}, {3, 150}, {100, 211}, {5, 101}};
        auto t = RandomNonZeroMean(static_cast<size_t>(rows * rank), 70);
        auto bf = RandomNonZeroMean(static_cast<size_t>(rank * out), 71);
        auto y0 = RandomNonZeroMean(static_cast<size_t>(rows * ldy), 72);
        for (DType dt : {DType::kF32, DType::kF16, DType::kBF16}) {
          auto bt = As(dt, bf);
          const auto bp = PackedBt(dt, bf, rank, out);  // what the kernels read
          std::vector<float> bw(bf.size());  // Bᵀ as the kernels read it (rounded to dt)
          ConvertToF32(dt, bt.data(), bw.data(), static_cast<int64_t>(bw.size()));
          for (auto [j0, j1] : ranges) {
            SCOPED_TRACE(std::string(DTypeName(dt)) + " rank " + std::to_string(rank) + " rows " +
                         std::to_string(rows) + " cols " + std::to_string(j0) + ".." +
                         std::to_string(j1));
            const int64_t width = j1 - j0;
            std::vector<float> dref(static_cast<size_t>(rows * width)), d(dref.size());
            LoraExpandScalar(t.data(), rows, rank, dt, bp.data(), out, j0, j1, dref.data());
            LoraExpandAvx2(t.data(), rows, rank, dt, bp.data(), out, j0, j1, d.data());
            for (size_t i = 0; i < d.size(); ++i) ASSERT_NEAR(dref[i], d[i], 1e-4f) << i;
            for (int64_t r = 0; r < rows; ++r) {
              for (int64_t j = j0; j < j1; ++j) {
                const float want = ExpandElement(t.data() + r * rank, rank, bw, out, j);
                ASSERT_EQ(d[static_cast<size_t>(r * width + j - j0)], want)
                    << "row " << r << " col " << j;
              }
            }
            // The same fma chain as the AVX-512 kernel: equal bits.
            if (DetectIsa() >= Isa::kAvx512) {
              std::vector<float> d512(d.size());
              LoraExpandAvx512(t.data(), rows, rank, dt, bp.data(), out, j0, j1, d512.data());
              for (size_t i = 0; i < d.size(); ++i) ASSERT_EQ(d512[i], d[i]) << i;
            }
            auto a = y0, b = y0, c = y0;
            LoraExpandAddScalar(t.data(), rows, rank, dt, bp.data(), out, j0, j1, 0.5f, a.data(),
                                ldy);
            LoraExpandAddAvx2(t.data(), rows, rank, dt, bp.data(), out, j0, j1, 0.5f, b.data(), ldy);
            for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], 1e-4f) << i;
            for (int64_t r = 0; r < rows; ++r) {
              for (int64_t j = j0; j < j1; ++j) {
                const size_t at = static_cast<size_t>(r * ldy + j);
                ASSERT_EQ(b[at], std::fma(0.5f, ExpandElement(t.data() + r * rank, rank, bw, out, j),
                                          y0[at]))
                    << r << " " << j;
              }
            }
            for (int64_t r = 0; r < rows; ++r) {
              std::vector<float> one(static_cast<size_t>(width));
              LoraExpandAvx2(t.data() + r * rank, 1, rank, dt, bp.data(), out, j0, j1, one.data());
              for (int64_t j = 0; j < width; ++j) ASSERT_EQ(one[j], d[r * width + j]) << "row " << r;
              LoraExpandAddAvx2(t.data() + r * rank, 1, rank, dt, bp.data(), out, j0, j1, 0.5f,
                                c.data() + r * ldy, ldy);
            }
            for (size_t i = 0; i < b.size(); ++i) ASSERT_EQ(b[i], c[i]) << i;
            for (int64_t r = 0; r < rows; ++r) {  // columns outside [j0, j1) untouched
              for (int64_t j = 0; j < ldy; ++j) {
                if (j < j0 || j >= j1) {
                  ASSERT_EQ(b[r * ldy + j], y0[r * ldy + j]) << r << " " << j;
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
