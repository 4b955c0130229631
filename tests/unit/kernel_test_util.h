// Kernel test helpers: random values with a non-zero mean (a dropped term shows), and a Bᵀ [rank, out] (f32) rounded to a dtype and packed into the LoRA expand kernels' panels.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "tensor/dtype.h"
#include "tensor/lora_panels.h"

namespace loom {

inline std::vector<float> RandomNonZeroMean(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.3f, 1.0f);  // non-zero mean: a dropped term shows
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

inline std::vector<uint8_t> PackedBt(DType dt, const std::vector<float>& bt, int rank, int64_t out) {
  std::vector<float> b(bt.size());  // B [out, rank], as PEFT stores lora_B
  for (int k = 0; k < rank; ++k) {
    for (int64_t j = 0; j < out; ++j) b[static_cast<size_t>(j * rank + k)] = bt[static_cast<size_t>(k * out + j)];
  }
  std::vector<uint8_t> raw(b.size() * DTypeSize(dt));
  ConvertFromF32(dt, b.data(), raw.data(), static_cast<int64_t>(b.size()));
  std::vector<uint8_t> packed(static_cast<size_t>(LoraPanelsSize(rank, out)) * DTypeSize(dt));
  PackLoraPanels(dt, raw.data(), rank, out, packed.data());
  return packed;
}

}  // namespace loom
