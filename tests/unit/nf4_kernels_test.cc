// bitsandbytes 4-bit (NF4, FP4) kernels: panel packing, every ISA level bit-exact with the scalar
// reference (random inputs, ragged shapes, every row-tile size, both codes) and close to the exact
// sum, batch invariance of the op.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "cpu/nf4_cpu.h"
#include "ops/matmul_nf4.h"

namespace loom {
namespace {

std::vector<cpu::Isa> Levels() {
  std::vector<cpu::Isa> levels = {cpu::Isa::kScalar};
  for (cpu::Isa isa : {cpu::Isa::kAvx2, cpu::Isa::kAvx512, cpu::Isa::kAvx512Bf16, cpu::Isa::kAmx}) {
    if (cpu::DetectIsa() >= isa) levels.push_back(isa);
  }
  return levels;
}

TEST(Nf4Kernels, PackUnpackRoundTripAndLayout) {
  std::mt19937 rng(1);
  const int64_t k = 192;
  std::vector<uint8_t> q(static_cast<size_t>(16 * k));
  for (auto& v : q) v = static_cast<uint8_t>(rng() % 16);
  std::vector<uint8_t> packed(q.size() / 2);
  cpu::PackNf4Panel(q.data(), k, packed.data());
  for (int64_t c = 0; c < 16; ++c) {
    for (int64_t i = 0; i < k; ++i)
      ASSERT_EQ(cpu::UnpackNf4(packed.data(), c, i), q[static_cast<size_t>(c * k + i)]);
  }
  // Chunk t, byte c: column c's input 2t (low nibble) and 2t + 1 (high nibble).
  EXPECT_EQ(packed[5 * 16 + 3] & 0x0F, q[3 * k + 10]);
  EXPECT_EQ(packed[5 * 16 + 3] >> 4, q[3 * k + 11]);
  EXPECT_EQ(cpu::kNf4Code[7], 0.0f);
  EXPECT_EQ(cpu::kNf4Code[0], -1.0f);
  EXPECT_EQ(cpu::kNf4Code[15], 1.0f);
  // FP4: sign bit 3; 0b0011 is 1.0, 0b0001 the subnormal 1/192; the padding index is +0.0.
  EXPECT_EQ(cpu::kFp4Code[3], 1.0f);
  EXPECT_EQ(cpu::kFp4Code[11], -1.0f);
  EXPECT_EQ(cpu::kFp4Code[1], 1.0f / 192.0f);
  EXPECT_EQ(cpu::kFp4Code[2], 2.0f / 3.0f);
  EXPECT_EQ(cpu::kFp4Code[cpu::Bnb4ZeroIndex(cpu::Bnb4Type::kFp4)], 0.0f);
  EXPECT_FALSE(std::signbit(cpu::kFp4Code[cpu::Bnb4ZeroIndex(cpu::Bnb4Type::kFp4)]));
  EXPECT_EQ(cpu::kNf4Code[cpu::Bnb4ZeroIndex(cpu::Bnb4Type::kNf4)], 0.0f);
  for (int q = 0; q < 8; ++q) EXPECT_EQ(cpu::kFp4Code[q + 8], -cpu::kFp4Code[q]) << q;
}

TEST(Nf4Kernels, EveryLevelBitExactWithTheScalarReferenceAndCloseToTheExactSum) {
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::uniform_real_distribution<float> am(0.0f, 0.1f);
  for (cpu::Bnb4Type type : {cpu::Bnb4Type::kNf4, cpu::Bnb4Type::kFp4}) {
  const float* code = cpu::Bnb4Code(type);
  for (int64_t block : {32, 64, 128}) {
    for (int64_t k : {128, 256, 384}) {
      if (k % block) continue;
      for (int64_t n : {1, 2, 3, 4, 5, 7, 8, 9, 11,
                        14}) {  // AVX2: 4-, 2-, 1-row tiles; from 8 rows decoded panels
        // m = 301: cpu::MatmulNf4 hands a block of all to the kernel as 2 full 128-column chunks
        // and a ragged third
        const int64_t m = 301, panels = (m + 15) / 16, blocks = k / block;
        std::vector<uint8_t> q(static_cast<size_t>(m * k));
        for (auto& v : q) v = static_cast<uint8_t>(rng() % 16);
        std::vector<float> absmax(static_cast<size_t>(m * blocks)), x(static_cast<size_t>(n * k));
        for (auto& v : absmax) v = am(rng);
        for (auto& v : x) v = nd(rng);
        auto w = Nf4WeightFromRows(q.data(), absmax.data(), m, k, block, "w", type);
        ASSERT_TRUE(w.ok()) << w.status().ToString();
        ASSERT_EQ((*w)->panels, panels);
        for (int64_t j = 0; j < m; j += 7) {
          for (int64_t i = 0; i < k; i += 5) {
            ASSERT_EQ((*w)->Dequantized(j, i),
                      code[q[static_cast<size_t>(j * k + i)]] *
                          absmax[static_cast<size_t>(j * blocks + i / block)]);
          }
        }
        std::vector<float> ref(static_cast<size_t>(n * m));
        cpu::MatmulNf4Scalar(x.data(), n, k, (*w)->q.data(), (*w)->absmax.data(), block, code, 0,
                             m, ref.data(), m);
        // The exact sum in double; f32 fma chains keep ~2⁻²⁴ relative per step: 1e-5 of Σ|terms|.
        for (int64_t r = 0; r < n; ++r) {
          for (int64_t j = 0; j < m; ++j) {
            double exact = 0, mag = 0;
            for (int64_t i = 0; i < k; ++i) {
              const double t = double(x[static_cast<size_t>(r * k + i)]) *
                               code[q[static_cast<size_t>(j * k + i)]] *
                               absmax[static_cast<size_t>(j * blocks + i / block)];
              exact += t;
              mag += std::fabs(t);
            }
            ASSERT_NEAR(ref[static_cast<size_t>(r * m + j)], exact, 1e-5 * mag + 1e-30)
                << r << "," << j;
          }
        }
        for (cpu::Isa isa : Levels()) {
          SCOPED_TRACE(std::string(cpu::IsaName(isa)) + " " + cpu::Bnb4TypeName(type) +
                       " block=" + std::to_string(block) + " k=" + std::to_string(k) +
                       " n=" + std::to_string(n));
          // Column ranges as the op splits them: whole panels, several panels, a ragged end; or
          // one block of all.
          using Blocks = std::vector<std::pair<int64_t, int64_t>>;
          for (const Blocks& cuts : {Blocks{{0, 16}, {16, 80}, {80, 96}, {96, m}}, Blocks{{0, m}}}) {
            std::vector<float> y(static_cast<size_t>(n * m), -1.0f);
            for (auto [j0, j1] : cuts) {
              cpu::MatmulNf4(isa, x.data(), n, k, (*w)->q.data(), (*w)->absmax.data(), block, code,
                             j0, j1, y.data() + j0, m);
            }
            for (size_t i = 0; i < y.size(); ++i) ASSERT_EQ(y[i], ref[i]) << "cuts " << cuts.size() << " at " << i;
          }
        }
      }
    }
  }
  }
}

TEST(Nf4Kernels, OpIsBatchInvariant) {
  std::mt19937 rng(4);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const int64_t rows = 70, cols = 192, n = 11, block = 64;
  std::vector<uint8_t> q(static_cast<size_t>(rows * cols));
  for (auto& v : q) v = static_cast<uint8_t>(rng() % 16);
  std::vector<float> absmax(static_cast<size_t>(rows * cols / block)),
      x(static_cast<size_t>(n * cols));
  for (auto& v : absmax) v = std::fabs(nd(rng)) * 0.05f;
  for (auto& v : x) v = nd(rng);
  auto w = Nf4WeightFromRows(q.data(), absmax.data(), rows, cols, block, "w");
  ASSERT_TRUE(w.ok());
  std::vector<float> all(static_cast<size_t>(n * rows));
  MatmulNf4(x.data(), n, **w, all.data());
  for (int64_t r = 0; r < n; ++r) {
    std::vector<float> one(static_cast<size_t>(rows));
    MatmulNf4(x.data() + r * cols, 1, **w, one.data());
    for (int64_t j = 0; j < rows; ++j)
      ASSERT_EQ(one[static_cast<size_t>(j)], all[static_cast<size_t>(r * rows + j)]);
  }
}

TEST(Nf4Kernels, RejectsWhatDoesNotFit) {
  std::vector<uint8_t> q(64 * 2, 3);
  std::vector<float> absmax(4, 1.0f);
  EXPECT_FALSE(Nf4WeightFromRows(q.data(), absmax.data(), 2, 64, 48, "w").ok());  // 48 ∤ 64
  q[5] = 16;
  auto bad = Nf4WeightFromRows(q.data(), absmax.data(), 2, 64, 32, "model.x");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("model.x: code index 16 at [0, 5]"), std::string::npos);
  q[5] = 3;
  absmax[2] = std::nanf("");
  EXPECT_FALSE(Nf4WeightFromRows(q.data(), absmax.data(), 2, 64, 32, "w").ok());
}

}  // namespace
}  // namespace loom
