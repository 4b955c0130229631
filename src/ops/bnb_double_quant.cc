// bitsandbytes' double quantization of 4-bit absmax: its dynamic 8-bit map, and blockwise quantize
// and dequantize as bitsandbytes' CPU kernels compute them.
#include "ops/bnb_double_quant.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <utility>

namespace loom {

namespace {

// create_dynamic_map() as f32 bits, read from bitsandbytes 0.50.2.
constexpr uint32_t kDynamicMapBits[256] = {
0xbf7e3333, 0xbf7a999a, 0xbf770000, 0xbf736666, 0xbf6fcccd, 0xbf6c3333, 0xbf68999a, 0xbf650000,
0xbf616666, 0xbf5dcccd, 0xbf5a3333, 0xbf56999a, 0xbf530000, 0xbf4f6666, 0xbf4bcccd, 0xbf483333,
0xbf44999a, 0xbf410000, 0xbf3d6666, 0xbf39cccd, 0xbf363334, 0xbf32999a, 0xbf2f0000, 0xbf2b6666,
0xbf27cccd, 0xbf243334, 0xbf20999a, 0xbf1d0000, 0xbf196666, 0xbf15cccd, 0xbf123334, 0xbf0e999a,
0xbf0b0000, 0xbf076666, 0xbf03cccc, 0xbf003333, 0xbef93332, 0xbef20000, 0xbeeacccc, 0xbee3999a,
0xbedc6666, 0xbed53333, 0xbece0000, 0xbec6cccc, 0xbebf999a, 0xbeb86666, 0xbeb13333, 0xbeaa0000,
0xbea2cccc, 0xbe9b999a, 0xbe946666, 0xbe8d3334, 0xbe860000, 0xbe7d9999, 0xbe6f3333, 0xbe60cccd,
0xbe526666, 0xbe440000, 0xbe35999a, 0xbe273333, 0xbe18cccd, 0xbe0a6666, 0xbdf80000, 0xbddb3334,
0xbdc9eb85, 0xbdc428f7, 0xbdbe6667, 0xbdb8a3d7, 0xbdb2e148, 0xbdad1eb8, 0xbda75c2a, 0xbda1999a,
0xbd9bd70a, 0xbd96147b, 0xbd9051eb, 0xbd8a8f5d, 0xbd84cccd, 0xbd7e147b, 0xbd728f5d, 0xbd670a3d,
0xbd5b851f, 0xbd500000, 0xbd447ae1, 0xbd38f5c3, 0xbd2d70a3, 0xbd21eb85, 0xbd166667, 0xbd0ae148,
0xbcfeb852, 0xbce7ae15, 0xbcd0a3d7, 0xbcb9999a, 0xbca28f5d, 0xbc8b851f, 0xbc68f5c3, 0xbc3ae148,
0xbc1f3b64, 0xbc160418, 0xbc0ccccd, 0xbc039581, 0xbbf4bc6a, 0xbbe24dd3, 0xbbcfdf3b, 0xbbbd70a4,
0xbbab020d, 0xbb989374, 0xbb8624dd, 0xbb676c8a, 0xbb428f5c, 0xbb1db22d, 0xbaf1a9fc, 0xbaa7ef9d,
0xba7765ff, 0xba59e83e, 0xba3c6a80, 0xba1eecc1, 0xba016f01, 0xb9c7e283, 0xb98ce705, 0xb923d70b,
0xb8ba1f4b, 0xb88aefb3, 0xb8378034, 0xb7b24206, 0xb70205ff, 0xb65a1a94, 0xb513a3b7, 0x00000000,
0x3513a3b7, 0x365a1a94, 0x370205ff, 0x37b24206, 0x38378034, 0x388aefb3, 0x38ba1f4b, 0x3923d70b,
0x398ce705, 0x39c7e283, 0x3a016f01, 0x3a1eecc1, 0x3a3c6a80, 0x3a59e83e, 0x3a7765ff, 0x3aa7ef9d,
0x3af1a9fc, 0x3b1db22d, 0x3b428f5c, 0x3b676c8a, 0x3b8624dd, 0x3b989374, 0x3bab020d, 0x3bbd70a4,
0x3bcfdf3b, 0x3be24dd3, 0x3bf4bc6a, 0x3c039581, 0x3c0ccccd, 0x3c160418, 0x3c1f3b64, 0x3c3ae148,
0x3c68f5c3, 0x3c8b851f, 0x3ca28f5d, 0x3cb9999a, 0x3cd0a3d7, 0x3ce7ae15, 0x3cfeb852, 0x3d0ae148,
0x3d166667, 0x3d21eb85, 0x3d2d70a3, 0x3d38f5c3, 0x3d447ae1, 0x3d500000, 0x3d5b851f, 0x3d670a3d,
0x3d728f5d, 0x3d7e147b, 0x3d84cccd, 0x3d8a8f5d, 0x3d9051eb, 0x3d96147b, 0x3d9bd70a, 0x3da1999a,
0x3da75c2a, 0x3dad1eb8, 0x3db2e148, 0x3db8a3d7, 0x3dbe6667, 0x3dc428f7, 0x3dc9eb85, 0x3ddb3334,
0x3df80000, 0x3e0a6666, 0x3e18cccd, 0x3e273333, 0x3e35999a, 0x3e440000, 0x3e526666, 0x3e60cccd,
0x3e6f3333, 0x3e7d9999, 0x3e860000, 0x3e8d3334, 0x3e946666, 0x3e9b999a, 0x3ea2cccc, 0x3eaa0000,
0x3eb13333, 0x3eb86666, 0x3ebf999a, 0x3ec6cccc, 0x3ece0000, 0x3ed53333, 0x3edc6666, 0x3ee3999a,
0x3eeacccc, 0x3ef20000, 0x3ef93332, 0x3f003333, 0x3f03cccc, 0x3f076666, 0x3f0b0000, 0x3f0e999a,
0x3f123334, 0x3f15cccd, 0x3f196666, 0x3f1d0000, 0x3f20999a, 0x3f243334, 0x3f27cccd, 0x3f2b6666,
0x3f2f0000, 0x3f32999a, 0x3f363334, 0x3f39cccd, 0x3f3d6666, 0x3f410000, 0x3f44999a, 0x3f483333,
0x3f4bcccd, 0x3f4f6666, 0x3f530000, 0x3f56999a, 0x3f5a3333, 0x3f5dcccd, 0x3f616666, 0x3f650000,
0x3f68999a, 0x3f6c3333, 0x3f6fcccd, 0x3f736666, 0x3f770000, 0x3f7a999a, 0x3f7e3333, 0x3f800000};

template <size_t... I>
constexpr std::array<float, 256> MapFromBits(std::index_sequence<I...>) {
  return {std::bit_cast<float>(kDynamicMapBits[I])...};
}
constexpr std::array<float, 256> kMap = MapFromBits(std::make_index_sequence<256>{});

using Lanes = std::array<float, 8>;  // torch's Vectorized<float> without AVX-512

Lanes Add(Lanes a, const Lanes& b) {
  for (size_t l = 0; l < 8; ++l) a[l] += b[l];
  return a;
}

// torch's multi_row_sum over `size` rows of 4 vectors (row i: vectors 4i..4i+3 of x): a running
// sum per level, carried up a level every level_step rows (its cascade), then the levels added.
std::array<Lanes, 4> MultiRowSum(const float* x, int64_t size) {
  constexpr int64_t kLevels = 4;
  int64_t log2 = 0;
  while ((int64_t{1} << log2) < size) ++log2;  // utils::CeilLog2
  const int64_t power = std::max<int64_t>(4, log2 / kLevels);
  const int64_t step = int64_t{1} << power, mask = step - 1;
  std::array<std::array<Lanes, 4>, kLevels> acc{};
  auto load = [&](int64_t row, int64_t k) {
    Lanes v;
    for (size_t l = 0; l < 8; ++l) v[l] = x[(row * 4 + k) * 8 + static_cast<int64_t>(l)];
    return v;
  };
  int64_t i = 0;
  for (; i + step <= size;) {
    for (int64_t j = 0; j < step; ++j, ++i) {
      for (int64_t k = 0; k < 4; ++k) acc[0][k] = Add(acc[0][k], load(i, k));
    }
    for (int64_t j = 1; j < kLevels; ++j) {
      for (int64_t k = 0; k < 4; ++k) {
        acc[j][k] = Add(acc[j][k], acc[j - 1][k]);
        acc[j - 1][k] = Lanes{};
      }
      if ((i & (mask << (j * power))) != 0) break;
    }
  }
  for (; i < size; ++i) {
    for (int64_t k = 0; k < 4; ++k) acc[0][k] = Add(acc[0][k], load(i, k));
  }
  for (int64_t j = 1; j < kLevels; ++j) {
    for (int64_t k = 0; k < 4; ++k) acc[0][k] = Add(acc[0][k], acc[j][k]);
  }
  return acc[0];
}

// torch.sum of a contiguous f32 vector on a CPU without AVX-512 kernels (SumKernel.cpp's
// vectorized inner sum, 8 lanes): 4 interleaved vector accumulators over whole groups of 4
// vectors with the level cascade, the leftover vectors into the first, the four summed in order;
// then the scalar tail, then the 8 lanes, one by one.
float TorchSum(const float* x, int64_t n) {
  const int64_t vecs = n / 8, rows = vecs / 4;
  std::array<Lanes, 4> partial = MultiRowSum(x, rows);
  for (int64_t v = rows * 4; v < vecs; ++v) {
    Lanes t;
    for (size_t l = 0; l < 8; ++l) t[l] = x[v * 8 + static_cast<int64_t>(l)];
    partial[0] = Add(partial[0], t);
  }
  for (int64_t k = 1; k < 4; ++k) partial[0] = Add(partial[0], partial[static_cast<size_t>(k)]);
  float sum = 0;
  for (int64_t i = vecs * 8; i < n; ++i) sum += x[i];
  for (size_t l = 0; l < 8; ++l) sum += partial[0][l];
  return sum;
}

// bitsandbytes 0.50.2's CPU quantize_blockwise (the C kernel behind quantize_4bit's
// compress_statistics) is not a nearest-entry search: it maps x·(1/absmax), clamped to [−1, 1],
// to one of 65,536 bins, bin = trunc(((x + 1)·0.5)·65535 + 0.5) in f32 one operation at a time,
// and each bin to the first map entry whose f32 midpoint with the next, 0.5·(m[i] + m[i+1]), is
// not below the bin's value −1 + 2i/65535. Where entries are denser than the bins (near 0) that
// is several entries off nearest; elsewhere it differs from nearest only near midpoints.
// Checked against bitsandbytes' own kernel on 40,101 values (uniform over [−1, 1], dense near 0,
// and a sweep between two entries): every code equal.
constexpr int kLutBins = 65536;

int LutBin(float x) {
  // NaN (only from an absmax mean that overflowed f32, which Nf4WeightFromRows then rejects as a
  // non-finite scale) takes bin 0 rather than an undefined float → int conversion.
  const float s = std::isnan(x) ? -1.0f : std::clamp(x, -1.0f, 1.0f);
  float t = s + 1.0f;
  t = t * 0.5f;
  t = t * static_cast<float>(kLutBins - 1);
  t = t + 0.5f;
  return static_cast<int>(t);  // t in [0.5, 65535.5]: truncation, as the kernel's cvttps
}

const std::array<uint8_t, kLutBins>& QuantizeLut() {
  static const std::array<uint8_t, kLutBins> lut = [] {
    std::array<float, 255> mid;
    for (size_t i = 0; i < mid.size(); ++i) mid[i] = 0.5f * (kMap[i] + kMap[i + 1]);
    std::array<uint8_t, kLutBins> t{};
    size_t q = 0;
    for (int i = 0; i < kLutBins; ++i) {
      const float value = -1.0f + (2.0f * static_cast<float>(i)) / static_cast<float>(kLutBins - 1);
      while (q < mid.size() && mid[q] < value) ++q;
      t[static_cast<size_t>(i)] = static_cast<uint8_t>(q);
    }
    return t;
  }();
  return lut;
}

}  // namespace

const float* BnbDynamicMap() { return kMap.data(); }

int BnbDynamicCode(float normalized) { return QuantizeLut()[static_cast<size_t>(LutBin(normalized))]; }

float TorchMeanF32(const float* x, int64_t n) {
  return n > 0 ? TorchSum(x, n) / static_cast<float>(n) : 0.0f;
}

float DoubleQuantizeAbsmax(std::vector<float>* absmax) {
  const int64_t n = static_cast<int64_t>(absmax->size());
  if (n == 0) return 0.0f;
  const float offset = TorchMeanF32(absmax->data(), n);  // absmax.mean()
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = (*absmax)[static_cast<size_t>(i)] - offset;
  for (int64_t b0 = 0; b0 < n; b0 += kBnbNestedBlock) {
    const int64_t b1 = std::min(n, b0 + kBnbNestedBlock);
    float nested = 0;
    for (int64_t i = b0; i < b1; ++i) nested = std::max(nested, std::fabs(v[static_cast<size_t>(i)]));
    // A block of zeros: bitsandbytes writes code 0, whose map value times 0 is −0.
    const float inv = nested > 0 ? 1.0f / nested : 0.0f;
    for (int64_t i = b0; i < b1; ++i) {
      const int q = nested > 0 ? BnbDynamicCode(v[static_cast<size_t>(i)] * inv) : 0;
      (*absmax)[static_cast<size_t>(i)] = BnbNestedScale(kMap[static_cast<size_t>(q)], nested, offset);
    }
  }
  return offset;
}

}  // namespace loom
