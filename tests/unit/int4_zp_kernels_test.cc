// Asymmetric int4 (GPTQ/AWQ zero points, act-order permutation) kernels: every ISA level bit-exact with the scalar reference and close to the exact sum; the op batch invariant and equal to the dequantized product up to activation rounding.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "cpu/int4_cpu.h"
#include "cpu/int8_cpu.h"
#include "ops/matmul_int4.h"
#include "tensor/dtype.h"

namespace loom {
namespace {

std::vector<cpu::Isa> Levels() {
  std::vector<cpu::Isa> levels = {cpu::Isa::kScalar};
  if (cpu::DetectIsa() >= cpu::Isa::kAvx2) levels.push_back(cpu::Isa::kAvx2);
  if (cpu::DetectIsa() >= cpu::Isa::kAvx512 && cpu::HasAvx512Vnni()) levels.push_back(cpu::Isa::kAvx512);
  return levels;
}

TEST(Int4ZpKernels, EveryIsaMatchesTheScalarReferenceBitwise) {
  std::mt19937 rng(11);
  std::uniform_int_distribution<int> qd(-8, 7), xd(-127, 127), zd(0, 16);
  std::uniform_real_distribution<float> sd(0.001f, 0.05f);
  for (int group : {32, 64, 128}) {
    for (int64_t kp : {128, 384}) {
      for (int64_t n : {1, 2, 3, 4, 5, 9, 17, 40}) {
        const int64_t m = 148, panels = (m + 15) / 16, groups = kp / group;
        // xq: rows up to n rounded to 32, the padding random (what the AMX tiles may read)
        std::vector<int8_t> xq(static_cast<size_t>((n + 31) / 32 * 32 * kp)),
            q(static_cast<size_t>(panels * 16 * kp));
        for (auto& v : xq) v = static_cast<int8_t>(xd(rng));
        for (auto& v : q) v = static_cast<int8_t>(qd(rng));
        std::vector<uint8_t> wq(q.size() / 2), wz(static_cast<size_t>(panels * groups * 16));
        for (int64_t p = 0; p < panels; ++p) cpu::PackInt4Panel(q.data() + p * 16 * kp, kp, wq.data() + p * 16 * kp / 2);
        for (auto& v : wz) v = static_cast<uint8_t>(zd(rng));
        if (n == 9) {  // AVX2's int16 sums at their largest: x = −128 against u = 15, z = 16
          std::fill(xq.begin(), xq.begin() + kp, int8_t{-128});
          for (int64_t i = 0; i < kp; ++i) q[static_cast<size_t>(i)] = 7;  // column 0
          for (int64_t p = 0; p < panels; ++p) cpu::PackInt4Panel(q.data() + p * 16 * kp, kp, wq.data() + p * 16 * kp / 2);
          for (int64_t g = 0; g < groups; ++g) wz[static_cast<size_t>(g * 16)] = 16;
        }
        std::vector<uint16_t> wd(static_cast<size_t>(panels * groups * 16));
        for (auto& v : wd) v = F32ToF16(rng() % 2 ? sd(rng) : -sd(rng));
        auto at = [&](const auto& v, int64_t j, int64_t g) { return v[static_cast<size_t>(((j / 16) * groups + g) * 16 + j % 16)]; };
        std::vector<float> sx(static_cast<size_t>(n));
        for (auto& v : sx) v = sd(rng);
        std::vector<int32_t> sums(static_cast<size_t>(n * groups));
        cpu::Int4GroupSums(xq.data(), n, kp, group, sums.data());
        std::vector<float> ref(static_cast<size_t>(n * m));
        cpu::MatmulInt4ZpScalar(xq.data(), sx.data(), sums.data(), n, kp, wq.data(), wd.data(), wz.data(), group, 0, m, ref.data(), m);
        for (int64_t r = 0; r < n; ++r) {  // the exact Σ_g d_g Σ_i (u − z)·x in double
          for (int64_t j = 0; j < m; ++j) {
            double exact = 0, mag = 0;
            for (int64_t i = 0; i < kp; ++i) {
              const double u = q[static_cast<size_t>(j * kp + i)] + 8;
              const double t = double(xq[static_cast<size_t>(r * kp + i)]) * (u - at(wz, j, i / group)) * F16ToF32(at(wd, j, i / group));
              exact += t;
              mag += std::fabs(t);
            }
            exact *= sx[static_cast<size_t>(r)];
            mag *= sx[static_cast<size_t>(r)];
            ASSERT_NEAR(ref[static_cast<size_t>(r * m + j)], exact, 1e-5 * mag + 1e-30) << r << "," << j;
          }
        }
        for (cpu::Isa isa : Levels()) {
          SCOPED_TRACE(std::string(cpu::IsaName(isa)) + " group=" + std::to_string(group) +
                       " k=" + std::to_string(kp) + " n=" + std::to_string(n));
          // Column ranges as the op splits them (whole panels, a ragged end), and one range of
          // all 9 full panels and the ragged one: the AVX2 one-row tiles take panels i, q + i,
          // ... (2 streams of 4) before the rest; the AVX-512 ones read one panel at a time.
          using Blocks = std::vector<std::pair<int64_t, int64_t>>;
          for (const Blocks& blocks :
               {Blocks{{0, 16}, {16, 80}, {80, 96}, {96, m}}, Blocks{{0, m}}}) {
            std::vector<float> y(static_cast<size_t>(n * m), -1.0f);
            for (auto [j0, j1] : blocks) {
              cpu::MatmulInt4Zp(isa, xq.data(), sx.data(), sums.data(), n, kp, wq.data(), wd.data(),
                                wz.data(), group, j0, j1, y.data() + j0, m);
            }
            for (size_t i = 0; i < y.size(); ++i)
              ASSERT_EQ(y[i], ref[i]) << "blocks " << blocks.size() << " at " << i;
            // once per case (with the last level), where the CPU has AMX-INT8
            if (isa != Levels().back() || cpu::DetectIsa() < cpu::Isa::kAmx || !cpu::HasAmxInt8())
              continue;
            std::fill(y.begin(), y.end(),
                      -1.0f);  // the AMX-INT8 tiles (groups 64, 128), as the op calls them
            for (auto [j0, j1] : blocks) {
              cpu::MatmulInt4ZpAmx(xq.data(), sx.data(), sums.data(), n, kp, wq.data(), wd.data(),
                                   wz.data(), group, j0, j1, y.data() + j0, m);
            }
            for (size_t i = 0; i < y.size(); ++i)
              ASSERT_EQ(y[i], ref[i]) << "amx blocks " << blocks.size() << " at " << i;
          }
        }
      }
    }
  }
}

TEST(Int4ZpKernels, OpWithPermutationIsBatchInvariantAndMatchesTheDequantizedProduct) {
  std::mt19937 rng(12);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::uniform_int_distribution<int> ud(0, 15), zd(0, 16);
  std::uniform_real_distribution<float> sd(0.001f, 0.02f);
  const int64_t
      rows = 70,
      cols = 192,
      n = 21;  // ≥ kParallelRowsMin: the batch quantizes over the pool, each row alone inline
  std::vector<float> x(static_cast<size_t>(n * cols));
  for (auto& v : x) v = nd(rng);
  for (int group : {32, 64}) {
    for (bool permute : {false, true}) {
      const int64_t fg = cols / group;
      std::vector<uint8_t> u(static_cast<size_t>(rows * cols)), z(static_cast<size_t>(rows * fg));
      std::vector<uint16_t> d(static_cast<size_t>(rows * fg));
      for (auto& v : u) v = static_cast<uint8_t>(ud(rng));
      for (auto& v : z) v = static_cast<uint8_t>(zd(rng));
      for (auto& v : d) v = F32ToF16(sd(rng));
      std::vector<int32_t> perm;
      if (permute) {
        perm.resize(static_cast<size_t>(cols));
        std::iota(perm.begin(), perm.end(), 0);
        std::shuffle(perm.begin(), perm.end(), rng);
      }
      auto w = Int4WeightAsymmetric(u.data(), d.data(), z.data(), perm, rows, cols, group, "w");
      ASSERT_TRUE(w.ok()) << w.status().ToString();
      // Dequantized(j, i) in file order: kernel position k holds input perm[k].
      for (int64_t j = 0; j < rows; ++j) {
        for (int64_t k = 0; k < cols; ++k) {
          const int64_t i = permute ? perm[static_cast<size_t>(k)] : k;
          const size_t gi = static_cast<size_t>(j * fg + k / group);
          ASSERT_EQ((*w)->Dequantized(j, i), F16ToF32(d[gi]) * float(int(u[static_cast<size_t>(j * cols + k)]) - z[gi]));
        }
      }
      std::vector<float> all(static_cast<size_t>(n * rows));
      MatmulInt4(x.data(), n, **w, all.data());
      for (int64_t r = 0; r < n; ++r) {
        std::vector<float> one(static_cast<size_t>(rows));
        MatmulInt4(x.data() + r * cols, 1, **w, one.data());
        for (int64_t j = 0; j < rows; ++j) ASSERT_EQ(one[static_cast<size_t>(j)], all[static_cast<size_t>(r * rows + j)]);
        float amax = 0;
        for (int64_t i = 0; i < cols; ++i) amax = std::max(amax, std::fabs(x[static_cast<size_t>(r * cols + i)]));
        for (int64_t j = 0; j < rows; ++j) {
          double want = 0, bound = 0;
          for (int64_t i = 0; i < cols; ++i) {
            want += double(x[static_cast<size_t>(r * cols + i)]) * (*w)->Dequantized(j, i);
            bound += amax / 254.0 * std::fabs((*w)->Dequantized(j, i));
          }
          ASSERT_NEAR(all[static_cast<size_t>(r * rows + j)], want, bound * 1.01 + 1e-5) << r << "," << j;
        }
      }
    }
  }
}

TEST(Int4ZpKernels, RejectsBadValues) {
  std::vector<uint8_t> u(32 * 2, 3), z(2, 17);
  std::vector<uint16_t> d(2, F32ToF16(0.01f));
  auto w = Int4WeightAsymmetric(u.data(), d.data(), z.data(), {}, 2, 32, 32, "t");
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.status().message().find("zero point 17"), std::string::npos) << w.status().ToString();
  z.assign(2, 4);
  std::vector<int32_t> perm(32, 0);
  w = Int4WeightAsymmetric(u.data(), d.data(), z.data(), perm, 2, 32, 32, "t");
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.status().message().find("permutation"), std::string::npos) << w.status().ToString();
}

}  // namespace
}  // namespace loom
