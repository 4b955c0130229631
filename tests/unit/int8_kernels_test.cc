// Int8 (W8A8) kernels: every ISA level bit-exact with the exact integer sum over the panel layout; quantization rules; batch invariance.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <utility>

#include "cpu/int8_cpu.h"
#include "ops/matmul_int8.h"

namespace loom {
namespace {

std::vector<int8_t> RandomInt8(size_t n, std::mt19937* rng) {
  std::uniform_int_distribution<int> d(-127, 127);
  std::vector<int8_t> v(n);
  for (auto& x : v) x = static_cast<int8_t>(d(*rng));
  return v;
}

// Every ISA level this CPU has (each runs IntKernelFor(level)).
std::vector<cpu::Isa> Levels() {
  std::vector<cpu::Isa> levels;
  for (cpu::Isa isa : {cpu::Isa::kScalar, cpu::Isa::kAvx2, cpu::Isa::kAvx512, cpu::Isa::kAvx512Bf16, cpu::Isa::kAmx}) {
    if (isa <= cpu::DetectIsa()) levels.push_back(isa);
  }
  return levels;
}

// Every kernel this CPU can run, whichever level picks it (AVX2 also where AVX-VNNI exists).
using Int8Fn = void (*)(const uint8_t*, const float*, int64_t, int64_t, const int8_t*, const float*,
                        const int32_t*, int64_t, int64_t, float*, int64_t);
std::vector<std::pair<const char*, Int8Fn>> Kernels() {
  std::vector<std::pair<const char*, Int8Fn>> k = {{"scalar", cpu::MatmulInt8Scalar}};
  if (cpu::DetectIsa() >= cpu::Isa::kAvx2) k.emplace_back("avx2", cpu::MatmulInt8Avx2);
  if (cpu::DetectIsa() >= cpu::Isa::kAvx2 && cpu::HasAvxVnni()) k.emplace_back("avxvnni", cpu::MatmulInt8AvxVnni);
  if (cpu::DetectIsa() >= cpu::Isa::kAvx512 && cpu::HasAvx512Vnni()) k.emplace_back("avx512vnni", cpu::MatmulInt8Vnni);
  return k;
}

// Panels of q [m, k] (rows past m zero) and activations biased to u8 with padding, as the op builds them.
struct Packed {
  int64_t kp = 0;
  std::vector<int8_t> wq;
  std::vector<uint8_t> xu;
  std::vector<float> sw;
  std::vector<int32_t> wsum;
};
Packed Pack(const std::vector<int8_t>& xq, int64_t n, const std::vector<int8_t>& q, int64_t m, int64_t k,
            const std::vector<float>& sw) {
  Packed p;
  p.kp = (k + cpu::kInt8Align - 1) / cpu::kInt8Align * cpu::kInt8Align;
  const int64_t panels = (m + 15) / 16;
  std::vector<int8_t> rows(static_cast<size_t>(panels * 16 * p.kp), 0);
  p.sw.assign(static_cast<size_t>(panels * 16), 0.0f);
  p.wsum.assign(static_cast<size_t>(panels * 16), 0);
  for (int64_t j = 0; j < m; ++j) {
    p.sw[static_cast<size_t>(j)] = sw[static_cast<size_t>(j)];
    for (int64_t i = 0; i < k; ++i) {
      rows[static_cast<size_t>(j * p.kp + i)] = q[static_cast<size_t>(j * k + i)];
      p.wsum[static_cast<size_t>(j)] += q[static_cast<size_t>(j * k + i)];
    }
  }
  p.wq.resize(rows.size());
  for (int64_t b = 0; b < panels; ++b) cpu::PackInt8Panel(rows.data() + b * 16 * p.kp, p.kp, p.wq.data() + b * 16 * p.kp);
  p.xu.assign(static_cast<size_t>(n * p.kp), 128);
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t i = 0; i < k; ++i) p.xu[static_cast<size_t>(r * p.kp + i)] = static_cast<uint8_t>(xq[static_cast<size_t>(r * k + i)] + 128);
  }
  return p;
}

TEST(Int8Kernels, EveryLevelEqualsTheExactIntegerSum) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> scale(0.001f, 0.1f);
  for (int64_t k : {1, 4, 63, 64, 100, 256, 1000}) {
    // 8, 9, 12 and 15 rows: the AVX-512 kernel's 8-row group, then more groups reading the
    // panels again, which cpu::MatmulInt8 hands over in chunks of kIntChunkColumns (one block of
    // all: a full chunk and a ragged one)
    for (int64_t n : {1, 2, 3, 4, 5, 8, 9, 12, 15}) {
      const int64_t m = 141;  // 8 full panels and a ragged one: one block of all is 2 one-row tiles of 4 streams
      auto xq = RandomInt8(static_cast<size_t>(n * k), &rng);
      auto wq = RandomInt8(static_cast<size_t>(m * k), &rng);
      std::vector<float> sx(static_cast<size_t>(n)), sw(static_cast<size_t>(m));
      for (auto& s : sx) s = scale(rng);
      for (auto& s : sw) s = scale(rng);
      const Packed p = Pack(xq, n, wq, m, k, sw);
      // Reference: the integer sum in int64, then the kernels' one float expression.
      std::vector<float> want(static_cast<size_t>(n * m));
      for (int64_t r = 0; r < n; ++r) {
        for (int64_t j = 0; j < m; ++j) {
          int64_t acc = 0;
          for (int64_t i = 0; i < k; ++i) {
            acc += int64_t{xq[static_cast<size_t>(r * k + i)]} * wq[static_cast<size_t>(j * k + i)];
          }
          want[static_cast<size_t>(r * m + j)] =
              static_cast<float>(acc) * (sx[static_cast<size_t>(r)] * sw[static_cast<size_t>(j)]);
        }
      }
      for (cpu::Isa isa : Levels()) {
        SCOPED_TRACE(std::string(cpu::IsaName(isa)) + " k=" + std::to_string(k) + " n=" + std::to_string(n));
        // Column ranges as the op splits them: whole panels, a ragged end; or one block of all.
        using Blocks = std::vector<std::pair<int64_t, int64_t>>;
        for (const Blocks& blocks : {Blocks{{0, 16}, {16, 80}, {80, 96}, {96, m}}, Blocks{{0, m}}}) {
          std::vector<float> y(static_cast<size_t>(n * m), -1.0f);
          for (auto [j0, j1] : blocks) {
            cpu::MatmulInt8(isa, p.xu.data(), sx.data(), n, p.kp, p.wq.data(), p.sw.data(), p.wsum.data(), j0, j1,
                            y.data() + j0, m);
          }
          for (size_t i = 0; i < y.size(); ++i) ASSERT_EQ(y[i], want[i]) << "blocks " << blocks.size() << " at " << i;
        }
      }
      for (auto [name, fn] : Kernels()) {
        SCOPED_TRACE(std::string(name) + " k=" + std::to_string(k) + " n=" + std::to_string(n));
        std::vector<float> y(static_cast<size_t>(n * m), -1.0f);
        for (auto [j0, j1] : {std::pair<int64_t, int64_t>{0, 48}, {48, 64}, {64, m}}) {
          fn(p.xu.data(), sx.data(), n, p.kp, p.wq.data(), p.sw.data(), p.wsum.data(), j0, j1, y.data() + j0, m);
        }
        for (size_t i = 0; i < y.size(); ++i) ASSERT_EQ(y[i], want[i]) << "at " << i;
      }
    }
  }
}

// AMX-INT8 tiles (prefill) return the VNNI/scalar bits: row counts around the 16- and 32-row
// tiles, ragged column ranges, k not a multiple of 64 (padded).
TEST(Int8Kernels, AmxTilesEqualTheOtherLevels) {
  if (!cpu::HasAmxInt8()) GTEST_SKIP() << "no AMX-INT8 (or the tile state was not granted)";
  std::mt19937 rng(9);
  std::uniform_real_distribution<float> scale(0.001f, 0.1f);
  for (int64_t k : {64, 100, 896}) {
    for (int64_t n : {1, 15, 16, 17, 31, 32, 33, 47, 70}) {
      const int64_t m = 101;
      auto xq = RandomInt8(static_cast<size_t>(n * k), &rng);
      auto wq = RandomInt8(static_cast<size_t>(m * k), &rng);
      std::vector<float> sx(static_cast<size_t>((n + 31) / 32 * 32), 0.0f), sw(static_cast<size_t>(m));
      for (int64_t r = 0; r < n; ++r) sx[static_cast<size_t>(r)] = scale(rng);
      for (auto& s : sw) s = scale(rng);
      Packed p = Pack(xq, n, wq, m, k, sw);
      std::vector<float> want(static_cast<size_t>(n * m));
      cpu::MatmulInt8Scalar(p.xu.data(), sx.data(), n, p.kp, p.wq.data(), p.sw.data(), p.wsum.data(), 0, m,
                            want.data(), m);
      p.xu.resize(static_cast<size_t>((n + 31) / 32 * 32 * p.kp), 128);  // rows the tiles read
      std::vector<float> y(static_cast<size_t>(n * m), -1.0f);
      for (auto [j0, j1] : {std::pair<int64_t, int64_t>{0, 16}, {16, 80}, {80, 96}, {96, m}}) {
        cpu::MatmulInt8Amx(p.xu.data(), sx.data(), n, p.kp, p.wq.data(), p.sw.data(), p.wsum.data(), j0, j1,
                           y.data() + j0, m);
      }
      for (size_t i = 0; i < y.size(); ++i) ASSERT_EQ(y[i], want[i]) << "k=" << k << " n=" << n << " at " << i;
    }
  }
}

TEST(Int8Kernels, ExtremeValuesAtTheDepthLimitDoNotOverflow) {
  const int64_t k = cpu::kMaxInt8Depth;
  for (int8_t wv : {int8_t{-127}, int8_t{-128}}) {  // −128: pre-quantized weights may hold it
    std::vector<int8_t> x(static_cast<size_t>(k), 127), w(static_cast<size_t>(k), wv);
    const Packed p = Pack(x, 1, w, 1, k, {1.0f});
    const float one = 1.0f;
    for (cpu::Isa isa : Levels()) {
      float y = 0;
      cpu::MatmulInt8(isa, p.xu.data(), &one, 1, p.kp, p.wq.data(), p.sw.data(), p.wsum.data(), 0, 1, &y, 1);
      EXPECT_EQ(y, static_cast<float>(127 * wv * k)) << cpu::IsaName(isa);
    }
    for (auto [name, fn] : Kernels()) {
      float y = 0;
      fn(p.xu.data(), &one, 1, p.kp, p.wq.data(), p.sw.data(), p.wsum.data(), 0, 1, &y, 1);
      EXPECT_EQ(y, static_cast<float>(127 * wv * k)) << name;
    }
  }
}

// The AVX2 kernel's int16 step (vpmaddubsw) saturates above 32767 for a pair. Biased
// activations (xu up to 255) times weights would reach 2·255·127 = 64770; the kernel multiplies
// |w| ≤ 128 by ±xq ≤ 127 instead, at most 32512. Every pair here is at those extremes, with
// both signs, in blocks of 4 equal values (each lane's pairs hit the bound) and mixed.
TEST(Int8Kernels, ExtremePairsNeverSaturate) {
  const int8_t xs[] = {127, -127, 0, 1, -1};
  const int8_t ws[] = {-128, -127, 127, 0, 1};
  std::mt19937 rng(13);
  const int64_t k = 256, m = 37;
  for (int pass = 0; pass < 8; ++pass) {
    const int64_t n = 1 + pass;
    std::vector<int8_t> x(static_cast<size_t>(n * k)), w(static_cast<size_t>(m * k));
    for (size_t i = 0; i < x.size(); ++i) x[i] = pass < 2 ? xs[(i / 4 + pass) % 2] : xs[rng() % 5];
    for (size_t i = 0; i < w.size(); ++i) w[i] = pass < 2 ? ws[(i / 4 + i / k) % 3] : ws[rng() % 5];
    const std::vector<float> sw(static_cast<size_t>(m), 1.0f), sx(static_cast<size_t>(n), 1.0f);
    const Packed p = Pack(x, n, w, m, k, sw);
    for (auto [name, fn] : Kernels()) {
      std::vector<float> y(static_cast<size_t>(n * m));
      fn(p.xu.data(), sx.data(), n, p.kp, p.wq.data(), p.sw.data(), p.wsum.data(), 0, m, y.data(), m);
      for (int64_t r = 0; r < n; ++r) {
        for (int64_t j = 0; j < m; ++j) {
          int64_t exact = 0;
          for (int64_t i = 0; i < k; ++i) exact += int64_t{x[static_cast<size_t>(r * k + i)]} * w[static_cast<size_t>(j * k + i)];
          ASSERT_EQ(y[static_cast<size_t>(r * m + j)], static_cast<float>(exact)) << name << " pass " << pass << " " << r << "," << j;
        }
      }
    }
  }
}

// Every kernel against the scalar reference at every row count 1..70 (the row tiles' remainders),
// k padded (100 → 128), ragged column ranges.
TEST(Int8Kernels, EveryKernelEqualsTheScalarReferenceAtEveryRowCount) {
  std::mt19937 rng(17);
  std::uniform_real_distribution<float> scale(0.001f, 0.1f);
  const int64_t k = 100, m = 77;
  auto wq = RandomInt8(static_cast<size_t>(m * k), &rng);
  std::vector<float> sw(static_cast<size_t>(m));
  for (auto& v : sw) v = scale(rng);
  for (int64_t n = 1; n <= 70; ++n) {
    auto xq = RandomInt8(static_cast<size_t>(n * k), &rng);
    std::vector<float> sx(static_cast<size_t>(n));
    for (auto& v : sx) v = scale(rng);
    const Packed p = Pack(xq, n, wq, m, k, sw);
    std::vector<float> want(static_cast<size_t>(n * m));
    cpu::MatmulInt8Scalar(p.xu.data(), sx.data(), n, p.kp, p.wq.data(), p.sw.data(), p.wsum.data(), 0, m,
                          want.data(), m);
    for (auto [name, fn] : Kernels()) {
      std::vector<float> y(static_cast<size_t>(n * m), -1.0f);
      for (auto [j0, j1] : {std::pair<int64_t, int64_t>{0, 16}, {16, 64}, {64, m}}) {
        fn(p.xu.data(), sx.data(), n, p.kp, p.wq.data(), p.sw.data(), p.wsum.data(), j0, j1, y.data() + j0, m);
      }
      for (size_t i = 0; i < y.size(); ++i) ASSERT_EQ(y[i], want[i]) << name << " n=" << n << " at " << i;
    }
  }
}

// The level → kernel rule (int8_cpu.h): AVX512_VNNI from kAvx512, else AVX-VNNI or AVX2 from kAvx2.
TEST(Int8Kernels, EachLevelRunsItsKernel) {
  EXPECT_EQ(cpu::IntKernelFor(cpu::Isa::kScalar), cpu::IntKernel::kScalar);
  const cpu::IntKernel avx2 = cpu::HasAvxVnni() ? cpu::IntKernel::kAvxVnni : cpu::IntKernel::kAvx2;
  EXPECT_EQ(cpu::IntKernelFor(cpu::Isa::kAvx2), avx2);
  for (cpu::Isa isa : {cpu::Isa::kAvx512, cpu::Isa::kAvx512Bf16, cpu::Isa::kAmx}) {
    EXPECT_EQ(cpu::IntKernelFor(isa), cpu::HasAvx512Vnni() ? cpu::IntKernel::kAvx512Vnni : avx2) << cpu::IsaName(isa);
  }
  std::printf("int kernels here: avx2 level → %s, %s level → %s\n", cpu::IntKernelName(cpu::IntKernelFor(cpu::Isa::kAvx2)),
              cpu::IsaName(cpu::DetectIsa()), cpu::IntKernelName(cpu::IntKernelFor(cpu::DetectIsa())));
}

TEST(Int8Quantize, RowsAreSymmetricRoundHalfEvenAndZeroSafe) {
  // max|x| = 127 → scale 1: values are rounded half to even and clamped.
  const float x[] = {127.0f, -127.0f, 0.5f, 1.5f, 2.5f, -0.5f, -3.49f, 0.0f};
  int8_t q[8];
  float s = 0;
  cpu::QuantizeRowsInt8(x, 1, 8, q, &s);
  EXPECT_EQ(s, 1.0f);
  const int8_t want[] = {127, -127, 0, 2, 2, 0, -3, 0};
  for (int i = 0; i < 8; ++i) EXPECT_EQ(q[i], want[i]) << i;
  const float zeros[4] = {0, 0, 0, 0};
  int8_t qz[4] = {1, 1, 1, 1};
  cpu::QuantizeRowsInt8(zeros, 1, 4, qz, &s);
  EXPECT_EQ(s, 0.0f);
  for (int8_t v : qz) EXPECT_EQ(v, 0);
}

TEST(Int8Quantize, WeightErrorIsAtMostHalfAStep) {
  std::mt19937 rng(3);
  std::normal_distribution<float> d(0, 0.05f);
  const int64_t rows = 24, cols = 80;
  std::vector<float> w(static_cast<size_t>(rows * cols));
  for (auto& v : w) v = d(rng);
  auto q = QuantizeWeightInt8(Tensor{DType::kF32, {rows, cols}, w.data()}, "w");
  ASSERT_TRUE(q.ok()) << q.status().ToString();
  for (int64_t j = 0; j < rows; ++j) {
    const float s = (*q)->scale[static_cast<size_t>(j)];
    int32_t sum = 0;
    for (int64_t i = 0; i < cols; ++i) {
      const int8_t v = (*q)->At(j, i);
      sum += v;
      EXPECT_LE(std::fabs(v * s - w[static_cast<size_t>(j * cols + i)]), s * 0.5f + 1e-7f);
    }
    EXPECT_EQ(sum, (*q)->sum[static_cast<size_t>(j)]);
  }
  // Too deep for exact int32 sums: refused by name.
  std::vector<float> wide(static_cast<size_t>(cpu::kMaxInt8Depth + 4), 1.0f);
  auto bad = QuantizeWeightInt8(Tensor{DType::kF32, {1, cpu::kMaxInt8Depth + 4}, wide.data()}, "model.x.weight");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("model.x.weight"), std::string::npos);
  // A NaN or Inf weight (a load with --no-check-weights) is refused naming its row; a NaN was
  // skipped by the row max and quantized like any weight.
  for (float v : {std::nanf(""), INFINITY, -INFINITY}) {
    std::vector<float> w(3 * 40, 0.5f);
    w[2 * 40 + 7] = v;
    auto q = QuantizeWeightInt8(Tensor{DType::kF32, {3, 40}, w.data()}, "model.y.weight");
    ASSERT_FALSE(q.ok()) << v;
    EXPECT_NE(q.status().message().find("model.y.weight to int8: row 2 has a weight that is not finite"),
              std::string::npos)
        << q.status().message();
  }
}

TEST(Int8Matmul, EachRowIsTheSameAloneAndInABatch) {
  std::mt19937 rng(11);
  std::normal_distribution<float> d(0, 1);
  // 7 rows quantize inline, 39 over the pool (ForEachRowRange): alone, each row is inline.
  for (const int64_t n : {int64_t{7}, int64_t{39}}) {
    const int64_t rows = 96, cols = 160;
    std::vector<float> w(static_cast<size_t>(rows * cols)), x(static_cast<size_t>(n * cols));
    for (auto& v : w) v = d(rng) * 0.05f;
    for (auto& v : x) v = d(rng);
    auto q = QuantizeWeightInt8(Tensor{DType::kF32, {rows, cols}, w.data()}, "w");
    ASSERT_TRUE(q.ok());
    std::vector<float> batch(static_cast<size_t>(n * rows));
    MatmulInt8(x.data(), n, **q, batch.data());
    for (int64_t r = 0; r < n; ++r) {
      std::vector<float> alone(static_cast<size_t>(rows));
      MatmulInt8(x.data() + r * cols, 1, **q, alone.data());
      for (int64_t j = 0; j < rows; ++j)
        ASSERT_EQ(alone[static_cast<size_t>(j)], batch[static_cast<size_t>(r * rows + j)]);
      // And close to the f32 product: per-product relative error ≤ ~1/127.
      for (int64_t j = 0; j < rows; ++j) {
        double exact = 0, mag = 0;
        for (int64_t i = 0; i < cols; ++i) {
          exact +=
              double{x[static_cast<size_t>(r * cols + i)]} * w[static_cast<size_t>(j * cols + i)];
          mag += std::fabs(double{x[static_cast<size_t>(r * cols + i)]} *
                           w[static_cast<size_t>(j * cols + i)]);
        }
        EXPECT_LE(std::fabs(alone[static_cast<size_t>(j)] - exact), mag / 127.0);
      }
    }
  }
}

}  // namespace
}  // namespace loom
