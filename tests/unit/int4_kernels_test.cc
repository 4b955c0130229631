// Int4 (W4A8) kernels: packing, the group-wise quantization rule, every ISA level bit-exact with the scalar reference and close to an exact sum, batch invariance.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <utility>

#include "cpu/int4_cpu.h"
#include "cpu/int8_cpu.h"
#include "ops/matmul_int4.h"
#include "tensor/dtype.h"

namespace loom {
namespace {

// Every ISA level this CPU has (each runs IntKernelFor(level)).
std::vector<cpu::Isa> Levels() {
  std::vector<cpu::Isa> levels;
  for (cpu::Isa isa : {cpu::Isa::kScalar, cpu::Isa::kAvx2, cpu::Isa::kAvx512, cpu::Isa::kAvx512Bf16, cpu::Isa::kAmx}) {
    if (isa <= cpu::DetectIsa()) levels.push_back(isa);
  }
  return levels;
}

// Every kernel this CPU can run, whichever level picks it (AVX2 also where AVX-VNNI exists).
using Int4Fn = void (*)(const int8_t*, const float*, const int32_t*, int64_t, int64_t, const uint8_t*,
                        const uint16_t*, int, int64_t, int64_t, float*, int64_t);
// The entry points that also issue an epilogue's lines (cpu::SidePrefetch) while they compute:
// a prefetch changes no value, so they must give the plain kernels' bits.
const char* SideLines() {
  static const std::vector<char> lines(1 << 16, 1);
  return lines.data();
}
using Int4SideFn = void (*)(const int8_t*, const float*, const int32_t*, int64_t, int64_t,
                           const uint8_t*, const uint16_t*, int, int64_t, int64_t, float*, int64_t,
                           cpu::SidePrefetch*);
template <Int4SideFn kKernel>
void WithSide(const int8_t* xq, const float* sx, const int32_t* corr, int64_t n, int64_t kp,
              const uint8_t* wq, const uint16_t* wd, int group, int64_t j0, int64_t j1, float* y,
              int64_t ldy) {
  cpu::SidePrefetch side;
  side.Add(SideLines(), 1 << 16);
  kKernel(xq, sx, corr, n, kp, wq, wd, group, j0, j1, y, ldy, &side);
}

std::vector<std::pair<const char*, Int4Fn>> Kernels() {
  std::vector<std::pair<const char*, Int4Fn>> k;
  if (cpu::DetectIsa() >= cpu::Isa::kAvx2) k.emplace_back("avx2", cpu::MatmulInt4Avx2);
  if (cpu::DetectIsa() >= cpu::Isa::kAvx2) k.emplace_back("avx2 side", WithSide<cpu::MatmulInt4Avx2Side>);
  if (cpu::DetectIsa() >= cpu::Isa::kAvx512 && cpu::HasAvx512Vnni()) k.emplace_back("avx512vnni side", WithSide<cpu::MatmulInt4VnniSide>);
  if (cpu::DetectIsa() >= cpu::Isa::kAvx2 && cpu::HasAvxVnni()) k.emplace_back("avxvnni", cpu::MatmulInt4AvxVnni);
  if (cpu::DetectIsa() >= cpu::Isa::kAvx512 && cpu::HasAvx512Vnni()) k.emplace_back("avx512vnni", cpu::MatmulInt4Vnni);
  // AMX-INT8 tiles (groups 64 and 128; 32 runs the scalar reference): the callers below give
  // it activation rows up to n rounded to 32, the padding random.
  if (cpu::DetectIsa() >= cpu::Isa::kAmx && cpu::HasAmxInt8())
    k.emplace_back("amx", cpu::MatmulInt4Amx);
  return k;
}

// Random panels (values from `wvals`, columns past m zero) and f16 scales, as the quantizer lays them out.
struct Panels {
  std::vector<int8_t> q;  // [panels · 16, kp]
  std::vector<uint8_t> wq;
  std::vector<uint16_t> wd;
};
Panels RandomPanels(int64_t m, int64_t kp, int group, const std::vector<int8_t>& wvals, std::mt19937* rng) {
  const int64_t panels = (m + 15) / 16, groups = kp / group;
  std::uniform_real_distribution<float> sd(0.001f, 0.05f);
  Panels p;
  p.q.assign(static_cast<size_t>(panels * 16 * kp), 0);
  for (int64_t i = 0; i < m * kp; ++i) p.q[static_cast<size_t>(i)] = wvals[(*rng)() % wvals.size()];
  p.wq.resize(static_cast<size_t>(panels * 16 * kp / 2));
  for (int64_t b = 0; b < panels; ++b) cpu::PackInt4Panel(p.q.data() + b * 16 * kp, kp, p.wq.data() + b * 16 * kp / 2);
  p.wd.resize(static_cast<size_t>(panels * groups * 16));
  for (auto& v : p.wd) v = F32ToF16((*rng)() % 2 ? sd(*rng) : -sd(*rng));
  return p;
}

// Every kernel against the scalar reference at every row count 1..70 (the row tiles'
// remainders), ragged column ranges, groups 32, 64 and 128; then activations and weights at
// their extremes (±127, −128; −8, 7), where the AVX2 kernel's int16 sums are largest (pairs
// ≤ 3840, 4 blocks of both nibbles ≤ 30720).
TEST(Int4Kernels, EveryKernelEqualsTheScalarReferenceAtEveryRowCountAndAtTheExtremes) {
  std::mt19937 rng(21);
  std::uniform_real_distribution<float> sd(0.001f, 0.05f);
  std::vector<int8_t> all4;
  for (int v = -8; v <= 7; ++v) all4.push_back(static_cast<int8_t>(v));
  const int64_t kp = 256, m = 157;
  for (int group : {32, 64, 128}) {
    const int64_t groups = kp / group;
    // extreme 2: every product at the largest magnitude (u = 15, x = −128), the AVX2 kernel's
    // 4-block int16 sums at their bound (8 · 3840 = 30720).
    for (int extreme = 0; extreme < 3; ++extreme) {
      const std::vector<int8_t> wvals = extreme == 2 ? std::vector<int8_t>{7} : extreme ? std::vector<int8_t>{-8, 7} : all4;
      const Panels w = RandomPanels(m, kp, group, wvals, &rng);
      for (int64_t n = 1; n <= (extreme ? 9 : 70); ++n) {
        std::vector<int8_t> xq(static_cast<size_t>((n + 31) / 32 * 32 * kp));  // AMX's padding too
        const int8_t ext[] = {127, -127, -128};
        for (auto& v : xq) {
          v = extreme == 2 ? int8_t{-128} : extreme ? ext[rng() % 3] : static_cast<int8_t>(static_cast<int>(rng() % 255) - 127);
        }
        std::vector<float> sx(static_cast<size_t>(n));
        for (auto& v : sx) v = sd(rng);
        std::vector<int32_t> corr(static_cast<size_t>(n * groups));
        cpu::Int4Corrections(xq.data(), n, kp, group, corr.data());
        std::vector<float> want(static_cast<size_t>(n * m));
        cpu::MatmulInt4Scalar(xq.data(), sx.data(), corr.data(), n, kp, w.wq.data(), w.wd.data(), group, 0, m,
                              want.data(), m);
        // Column blocks as ForEachPanelBlock cuts them: several (1, 3 full panels, 5 full and a
        // ragged one) or one block of all (9 full panels and a ragged one: the AVX2 and
        // AVX-VNNI one-row tiles take panels i, q + i, ... before the rest, 2 streams of 4; the
        // AVX-512 one reads one panel at a time).
        using Blocks = std::vector<std::pair<int64_t, int64_t>>;
        for (const Blocks& blocks : {Blocks{{0, 16}, {16, 64}, {64, m}}, Blocks{{0, m}}}) {
          for (auto [name, fn] : Kernels()) {
            std::vector<float> y(static_cast<size_t>(n * m), -1.0f);
            for (auto [j0, j1] : blocks) {
              fn(xq.data(), sx.data(), corr.data(), n, kp, w.wq.data(), w.wd.data(), group, j0, j1, y.data() + j0, m);
            }
            for (size_t i = 0; i < y.size(); ++i) {
              ASSERT_EQ(y[i], want[i]) << name << " group " << group << " extreme " << extreme << " n=" << n
                                       << " blocks " << blocks.size() << " at " << i;
            }
          }
        }
      }
    }
  }
}

Tensor F32Matrix(std::vector<float>* data, int64_t rows, int64_t cols) {
  Tensor t;
  t.dtype = DType::kF32;
  t.shape = {rows, cols};
  t.data = data->data();
  return t;
}

TEST(Int4Kernels, PackUnpackRoundTrip) {
  std::mt19937 rng(1);
  std::uniform_int_distribution<int> d(-8, 7);
  const int64_t kp = 256;
  std::vector<int8_t> q(static_cast<size_t>(16 * kp));
  for (auto& v : q) v = static_cast<int8_t>(d(rng));
  std::vector<uint8_t> packed(q.size() / 2);
  cpu::PackInt4Panel(q.data(), kp, packed.data());
  for (int64_t c = 0; c < 16; ++c) {
    for (int64_t i = 0; i < kp; ++i) {
      ASSERT_EQ(cpu::UnpackInt4(packed.data(), c, i), q[static_cast<size_t>(c * kp + i)]) << c << "," << i;
    }
  }
  // The layout the kernels rely on: block t, byte 4c + e = column c's inputs 8t + e (low nibble)
  // and 8t + 4 + e (high nibble).
  EXPECT_EQ(packed[2 * 64 + 4 * 3 + 1] & 0x0F, q[3 * kp + 17] + 8);
  EXPECT_EQ(packed[2 * 64 + 4 * 3 + 1] >> 4, q[3 * kp + 21] + 8);
}

TEST(Int4Kernels, QuantizationRule) {
  std::mt19937 rng(2);
  std::normal_distribution<float> nd(0.0f, 0.05f);
  for (int group : {32, 64, 128}) {
    const int64_t rows = 5, cols = 200;  // not a multiple of 128, 64 or 32: padded groups
    std::vector<float> w(static_cast<size_t>(rows * cols));
    for (auto& v : w) v = nd(rng);
    for (int64_t i = 0; i < group; ++i) w[static_cast<size_t>(2 * cols + i)] = 0;  // one zero group
    auto q = QuantizeWeightInt4(F32Matrix(&w, rows, cols), "w", group);
    ASSERT_TRUE(q.ok()) << q.status().ToString();
    const Int4Weight& iw = **q;
    EXPECT_EQ(iw.k_pad, 256);
    for (int64_t j = 0; j < rows; ++j) {
      for (int64_t g = 0; g * group < cols; ++g) {
        const float d = iw.Scale(j, g);
        float m = 0;
        for (int64_t i = g * group; i < std::min<int64_t>(cols, (g + 1) * group); ++i) {
          const float v = w[static_cast<size_t>(j * cols + i)];
          if (std::fabs(v) > std::fabs(m)) m = v;
          // rint(v / d) within ±8; the largest value of the other sign clamps to 7 (error ≤ |d|)
          EXPECT_LE(std::fabs(iw.Dequantized(j, i) - v), std::fabs(d) * 1.001f) << j << "," << i;
        }
        if (m != 0) {  // the extreme is exactly −8·d: the f16 scale is d = m / −8 rounded
          EXPECT_EQ(d, F16ToF32(F32ToF16(m / -8.0f)));
        } else {
          EXPECT_EQ(d, 0.0f);
        }
      }
      for (int64_t i = cols; i < iw.k_pad; ++i) EXPECT_EQ(iw.Dequantized(j, i), 0.0f);
    }
  }
  std::vector<float> bad = {1.0f, std::nanf("")};
  EXPECT_FALSE(QuantizeWeightInt4(F32Matrix(&bad, 1, 2), "model.x", 32).ok());
  std::vector<float> ok = {1.0f, 2.0f};
  auto st = QuantizeWeightInt4(F32Matrix(&ok, 1, 2), "model.x", 16);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.status().message().find("model.x"), std::string::npos);
}

// The group --quantize int4 gives each projection: the requested one where it divides the
// inputs, else 64 or 32 (whole groups, as compressed-tensors stores them), else 0 (dense).
TEST(Int4Kernels, GroupForAProjection) {
  EXPECT_EQ(Int4GroupFor(896, 128), 128);
  EXPECT_EQ(Int4GroupFor(4864, 128), 128);
  EXPECT_EQ(Int4GroupFor(576, 128), 64);   // SmolLM2-135M's hidden size
  EXPECT_EQ(Int4GroupFor(960, 128), 64);   // SmolLM2-360M's
  EXPECT_EQ(Int4GroupFor(96, 128), 32);
  EXPECT_EQ(Int4GroupFor(64, 128), 64);
  EXPECT_EQ(Int4GroupFor(64, 32), 32);     // never larger than asked
  EXPECT_EQ(Int4GroupFor(4864, 32), 32);
  EXPECT_EQ(Int4GroupFor(48, 32), 0);
  EXPECT_EQ(Int4GroupFor(24, 128), 0);
  EXPECT_EQ(Int4GroupFor(200, 128), 0);
  EXPECT_EQ(Int4GroupFor(576, 64), 64);
  EXPECT_EQ(Int4GroupFor(96, 64), 32);
  EXPECT_EQ(Int4GroupFor(4864, 0), 0);    // not a group: no division by it
  EXPECT_EQ(Int4GroupFor(4864, 48), 0);
  EXPECT_EQ(Int4GroupFor(4864, -32), 0);
}

TEST(Int4Kernels, EveryLevelBitExactWithTheScalarReferenceAndCloseToTheExactSum) {
  std::mt19937 rng(3);
  std::uniform_int_distribution<int> d8(-127, 127), d4(-8, 7);
  std::uniform_real_distribution<float> sd(0.001f, 0.05f);
  for (int group : {32, 64, 128}) {
    for (int64_t kp : {128, 256, 896}) {
      // 8, 12 and 15 rows: the AVX-512 kernel's 8-row group, then 4 and 3 more reading the
      // panels again, which cpu::MatmulInt4 hands over in chunks of kIntChunkColumns (m = 301:
      // a block of all is 2 full chunks and a ragged third).
      for (int64_t n : {1, 2, 3, 4, 5, 8, 9, 12, 15}) {
        const int64_t m = 301, panels = (m + 15) / 16, groups = kp / group;
        // q[j, i] for j < panels · 16 (rows past m are zero, as the quantizer pads them)
        std::vector<int8_t> xq(static_cast<size_t>(n * kp)), q(static_cast<size_t>(panels * 16 * kp), 0);
        for (auto& v : xq) v = static_cast<int8_t>(d8(rng));
        for (int64_t i = 0; i < m * kp; ++i) q[static_cast<size_t>(i)] = static_cast<int8_t>(d4(rng));
        std::vector<uint8_t> wq(static_cast<size_t>(panels * 16 * kp / 2));
        for (int64_t p = 0; p < panels; ++p) cpu::PackInt4Panel(q.data() + p * 16 * kp, kp, wq.data() + p * 16 * kp / 2);
        std::vector<uint16_t> wd(static_cast<size_t>(panels * groups * 16));
        for (auto& v : wd) v = F32ToF16(rng() % 2 ? sd(rng) : -sd(rng));
        auto scale = [&](int64_t j, int64_t g) {
          return F16ToF32(wd[static_cast<size_t>(((j / 16) * groups + g) * 16 + j % 16)]);
        };
        std::vector<float> sx(static_cast<size_t>(n));
        for (auto& v : sx) v = sd(rng);
        std::vector<int32_t> corr(static_cast<size_t>(n * groups));
        cpu::Int4Corrections(xq.data(), n, kp, group, corr.data());
        std::vector<float> ref(static_cast<size_t>(n * m));
        cpu::MatmulInt4Scalar(xq.data(), sx.data(), corr.data(), n, kp, wq.data(), wd.data(), group, 0, m, ref.data(), m);
        // The exact sum in double: Σ_g d_g Σ_{i∈g} x·q, times sx. One f32 fma per group keeps
        // ~2⁻²⁴ relative per step: 1e-5 of Σ|terms| is a generous bound.
        for (int64_t r = 0; r < n; ++r) {
          for (int64_t j = 0; j < m; ++j) {
            double exact = 0, mag = 0;
            for (int64_t i = 0; i < kp; ++i) {
              const double t = double(xq[static_cast<size_t>(r * kp + i)]) * q[static_cast<size_t>(j * kp + i)] * scale(j, i / group);
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
          // Column ranges as the op splits them: whole panels, a ragged end; or one block of all.
          using Blocks = std::vector<std::pair<int64_t, int64_t>>;
          for (const Blocks& blocks : {Blocks{{0, 16}, {16, 80}, {80, 96}, {96, m}}, Blocks{{0, m}}}) {
            std::vector<float> y(static_cast<size_t>(n * m), -1.0f);
            for (auto [j0, j1] : blocks) {
              cpu::MatmulInt4(isa, xq.data(), sx.data(), corr.data(), n, kp, wq.data(), wd.data(), group, j0, j1,
                              y.data() + j0, m);
            }
            for (size_t i = 0; i < y.size(); ++i) ASSERT_EQ(y[i], ref[i]) << "blocks " << blocks.size() << " at " << i;
          }
        }
      }
    }
  }
}

TEST(Int4Kernels, OpIsBatchInvariantAndMatchesTheQuantizedProduct) {
  std::mt19937 rng(4);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  // 7 rows quantize inline, 38 over the pool (ForEachRowRange): alone, each row is inline. 38
  // rows at groups 64 and 128 run the AMX-INT8 tiles where the CPU has them, a row alone the
  // VNNI kernel: the same bits.
  for (const int64_t n : {int64_t{7}, int64_t{38}}) {
    const int64_t rows = 70, cols = 200;
    std::vector<float> w(static_cast<size_t>(rows * cols)), x(static_cast<size_t>(n * cols));
    for (auto& v : w) v = 0.05f * nd(rng);
    for (auto& v : x) v = nd(rng);
    for (int group : {32, 64, 128}) {
      auto q = QuantizeWeightInt4(F32Matrix(&w, rows, cols), "w", group);
      ASSERT_TRUE(q.ok());
      std::vector<float> all(static_cast<size_t>(n * rows));
      MatmulInt4(x.data(), n, **q, all.data());
      for (int64_t r = 0; r < n; ++r) {
        std::vector<float> one(static_cast<size_t>(rows));
        MatmulInt4(x.data() + r * cols, 1, **q, one.data());
        for (int64_t j = 0; j < rows; ++j)
          ASSERT_EQ(one[static_cast<size_t>(j)], all[static_cast<size_t>(r * rows + j)]);
        // Against the f32 product with the dequantized weight: only the activations' int8
        // rounding (≤ 1/254 of the row's max |x| per element) separates them.
        float amax = 0;
        for (int64_t i = 0; i < cols; ++i)
          amax = std::max(amax, std::fabs(x[static_cast<size_t>(r * cols + i)]));
        for (int64_t j = 0; j < rows; ++j) {
          double want = 0, bound = 0;
          for (int64_t i = 0; i < cols; ++i) {
            want += double(x[static_cast<size_t>(r * cols + i)]) * (*q)->Dequantized(j, i);
            bound += amax / 254.0 * std::fabs((*q)->Dequantized(j, i));
          }
          ASSERT_NEAR(all[static_cast<size_t>(r * rows + j)], want, bound * 1.01 + 1e-6)
              << r << "," << j;
        }
      }
    }
  }
}

}  // namespace
}  // namespace loom
