// LLM.int8 (bitsandbytes load_in_8bit) matmul: each row against an independent scalar replay of
// bitsandbytes' steps (f16 activations, per-row outliers exact, torch's 127 / rowmax, its
// 6.200124e-05), bit for bit without outliers, and batch invariance with outliers present.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "cpu/cpu_features.h"
#include "cpu/int8_cpu.h"
#include "ops/matmul_int8.h"
#include "tensor/dtype.h"

namespace loom {
namespace {

// bitsandbytes on one row (MatMul8bitLt with a single row: the outlier columns are the row's own).
std::vector<float> Replay(const float* x, int64_t k, const std::vector<int8_t>& cb,
                          const std::vector<float>& scb, int64_t m, float threshold) {
  std::vector<float> h(static_cast<size_t>(k));
  std::vector<int64_t> outl;
  float rowmax = 0;
  for (int64_t i = 0; i < k; ++i) {
    float v = F16ToF32(F32ToF16(x[i]));
    if (threshold > 0 && std::fabs(v) >= threshold) {
      outl.push_back(i);
      v = 0;
    }
    h[static_cast<size_t>(i)] = v;
    rowmax = std::max(rowmax, std::fabs(v));
  }
  const float inv = rowmax > 0 ? (1.0f / rowmax) * 127.0f : 0.0f;
  std::vector<float> y(static_cast<size_t>(m));
  for (int64_t j = 0; j < m; ++j) {
    int64_t acc = 0;
    for (int64_t i = 0; i < k; ++i) {
      acc += static_cast<int64_t>(std::nearbyint(h[static_cast<size_t>(i)] * inv)) *
             cb[static_cast<size_t>(j * k + i)];
    }
    float out = static_cast<float>(acc) * (rowmax * scb[static_cast<size_t>(j)]) * 6.200124e-05f;
    double extra = 0;  // the outlier columns by the dequantized weight, in double
    for (int64_t i : outl) {
      const float w = static_cast<float>(cb[static_cast<size_t>(j * k + i)]) *
                      scb[static_cast<size_t>(j)] * 7.874015718698502e-3f;
      extra += static_cast<double>(x[i]) * w;
    }
    y[static_cast<size_t>(j)] = out + static_cast<float>(extra);
  }
  return y;
}

TEST(LlmInt8, RowsMatchTheReplayAndAreBatchInvariant) {
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.0f, 2.5f);
  const int64_t m = 70, k = 192, n = 19;
  std::vector<int8_t> cb(static_cast<size_t>(m * k));
  for (auto& v : cb) v = static_cast<int8_t>(static_cast<int>(rng() % 255) - 127);
  std::vector<float> scb(static_cast<size_t>(m));
  for (auto& v : scb) v = 0.05f + std::fabs(nd(rng));
  std::vector<float> x(static_cast<size_t>(n * k));
  for (auto& v : x) v = nd(rng);  // |x| ≥ 6 in ~1.6 % of the elements
  for (const float threshold : {0.0f, 6.0f}) {
    auto w = Int8WeightFromRows(cb.data(), scb.data(), m, k, "w");
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    (*w)->llm_int8 = true;
    (*w)->outlier_threshold = threshold;
    EXPECT_EQ((*w)->Dequantized(3, 5), float(cb[3 * k + 5]) * scb[3] * 7.874015718698502e-3f);
    std::vector<float> all(static_cast<size_t>(n * m));
    MatmulInt8(x.data(), n, **w, all.data());
    int with_outliers = 0;
    for (int64_t r = 0; r < n; ++r) {
      std::vector<float> one(static_cast<size_t>(m));
      MatmulInt8(x.data() + r * k, 1, **w, one.data());
      const std::vector<float> ref = Replay(x.data() + r * k, k, cb, scb, m, threshold);
      bool outl = false;
      for (int64_t i = 0; i < k; ++i) outl |= threshold > 0 && std::fabs(x[r * k + i]) >= 6.0f;
      with_outliers += outl;
      for (int64_t j = 0; j < m; ++j) {
        ASSERT_EQ(one[j], all[r * m + j]) << "row " << r << " col " << j;  // batch invariant
        if (outl) {  // the outlier sum's order differs: f32 rounding only
          ASSERT_NEAR(one[j], ref[j], 2e-5f * (1 + std::fabs(ref[j]))) << r << "," << j;
        } else {
          ASSERT_EQ(one[j], ref[j]) << "threshold " << threshold << " row " << r << " col " << j;
        }
      }
    }
    if (threshold > 0) {
      EXPECT_GT(with_outliers, 5);
    }
  }
}

// A row holding NaN or ±Inf (a broken upstream layer) leaves the other rows' results unchanged
// (its own elements quantize to 0 where the f32 → int8 cast would be undefined).
TEST(LlmInt8, NonFiniteRowsDoNotDisturbOthers) {
  const int64_t m = 32, k = 64, n = 3;
  std::vector<int8_t> cb(static_cast<size_t>(m * k));
  for (size_t i = 0; i < cb.size(); ++i) cb[i] = static_cast<int8_t>(static_cast<int>(i % 255) - 127);
  std::vector<float> scb(static_cast<size_t>(m), 1.0f);
  std::vector<float> x(static_cast<size_t>(n * k));
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.37f * static_cast<float>(i));
  for (const float threshold : {0.0f, 6.0f}) {
    auto w = Int8WeightFromRows(cb.data(), scb.data(), m, k, "w");
    ASSERT_TRUE(w.ok());
    (*w)->llm_int8 = true;
    (*w)->outlier_threshold = threshold;
    std::vector<float> clean(static_cast<size_t>(n * m));
    MatmulInt8(x.data(), n, **w, clean.data());
    std::vector<float> bad_x = x;
    bad_x[static_cast<size_t>(k + 3)] = std::nanf("");
    bad_x[static_cast<size_t>(k + 9)] = INFINITY;
    bad_x[static_cast<size_t>(k + 10)] = -INFINITY;
    std::vector<float> y(static_cast<size_t>(n * m));
    MatmulInt8(bad_x.data(), n, **w, y.data());
    for (int64_t r : {0, 2}) {
      for (int64_t j = 0; j < m; ++j) ASSERT_EQ(y[r * m + j], clean[r * m + j]) << r << "," << j;
    }
  }
}

// The F16C rounding equals the scalar one bit for bit: ties, f16 subnormals and underflow, the
// overflow edge (65504 and 65520), ±0, ±Inf; NaN stays NaN.
TEST(LlmInt8, F16RoundingF16cEqualsScalar) {
  if (cpu::DetectIsa() < cpu::Isa::kAvx2) GTEST_SKIP() << "no AVX2/F16C";
  std::vector<float> x = {0.0f, -0.0f, 1.0f, 1.0f + 1.0f / 2048, 1.0f + 3.0f / 2048, 65504.0f,
                          65519.99f, 65520.0f, -65520.0f, 1e-8f, -3e-8f, 6.1e-5f, 5.96e-8f,
                          2.98e-8f, INFINITY, -INFINITY, std::nanf(""), 1e30f, -7.3f, 6.0f};
  std::mt19937 rng(5);
  std::uniform_int_distribution<uint32_t> bits;
  for (int i = 0; i < 20000; ++i) {  // random bit patterns: every exponent
    const uint32_t b = bits(rng);
    float f;
    std::memcpy(&f, &b, 4);
    x.push_back(f);
  }
  std::vector<float> a(x.size()), b(x.size());
  cpu::RoundToF16Scalar(x.data(), static_cast<int64_t>(x.size()), a.data());
  cpu::RoundToF16F16c(x.data(), static_cast<int64_t>(x.size()), b.data());
  for (size_t i = 0; i < x.size(); ++i) {
    if (std::isnan(a[i])) {
      ASSERT_TRUE(std::isnan(b[i])) << x[i];
      continue;
    }
    uint32_t ua, ub;
    std::memcpy(&ua, &a[i], 4);
    std::memcpy(&ub, &b[i], 4);
    ASSERT_EQ(ua, ub) << "x = " << x[i] << " scalar " << a[i] << " f16c " << b[i];
  }
}


// The AVX2 outlier scan and quantizer equal the scalar steps bit for bit (the outlier indices in
// order, the row max, every code): rows of 1 to 70 elements and 896 (every tail), thresholds 0 and
// 6, with outliers in any lane, NaN, ±Inf, ±0 and all-zero rows; inv from the row max as
// LlmInt8Row makes it, and inv values that push products past ±127.
TEST(LlmInt8, Avx2RowStepsEqualScalar) {
  if (cpu::DetectIsa() < cpu::Isa::kAvx2) GTEST_SKIP() << "no AVX2";
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::uniform_int_distribution<int> pick(0, 99);
  std::vector<int64_t> sizes;
  for (int64_t k = 1; k <= 70; ++k) sizes.push_back(k);
  sizes.push_back(896);
  int rows = 0, with_outliers = 0;
  for (const int64_t k : sizes) {
    for (int trial = 0; trial < 12; ++trial) {
      std::vector<float> h(static_cast<size_t>(k));
      for (auto& v : h) {
        const int p = pick(rng);
        v = p < 3 ? NAN : p < 5 ? (p == 3 ? INFINITY : -INFINITY) : p < 8 ? 0.0f : p < 9 ? -0.0f
                                                                                : normal(rng);
        if (trial == 0) v = 0.0f;               // an all-zero row
        if (trial == 1 && p < 9) v = 1.5f;      // finite only
        v = F16ToF32(F32ToF16(v));              // as RoundToF16 leaves it
      }
      for (const float threshold : {0.0f, 6.0f}) {
        std::vector<float> a = h, b = h;
        std::vector<int64_t> oa, ob;
        const float ma = cpu::LlmInt8OutliersAndMaxScalar(a.data(), k, threshold, &oa);
        const float mb = cpu::LlmInt8OutliersAndMaxAvx2(b.data(), k, threshold, &ob);
        ASSERT_EQ(oa, ob) << "k " << k << " threshold " << threshold;
        ASSERT_EQ(std::memcmp(&ma, &mb, 4), 0) << ma << " " << mb;
        ASSERT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0);
        with_outliers += !oa.empty();
        ++rows;
        const float row_inv = ma > 0 ? (1.0f / ma) * 127.0f : 0.0f;
        for (const float inv : {row_inv, 0.0f, 300.0f}) {
          std::vector<int8_t> qa(static_cast<size_t>(k)), qb(static_cast<size_t>(k), 99);
          cpu::LlmInt8QuantizeScalar(a.data(), k, inv, qa.data());
          cpu::LlmInt8QuantizeAvx2(a.data(), k, inv, qb.data());
          ASSERT_EQ(qa, qb) << "k " << k << " inv " << inv;
        }
      }
    }
  }
  EXPECT_GT(with_outliers, rows / 8);  // the outlier path ran (372 of 1,704 rows)
}

}  // namespace
}  // namespace loom
