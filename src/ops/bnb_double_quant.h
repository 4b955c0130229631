// bitsandbytes' double quantization of 4-bit absmax (bnb_4bit_use_double_quant): the absmax
// quantized blockwise to 8 bits with its dynamic map around their mean, and dequantized again.
#pragma once

#include <cstdint>
#include <vector>

namespace loom {

// bitsandbytes' only blocksize for double-quantized absmax (nested_blocksize).
inline constexpr int64_t kBnbNestedBlock = 256;

// A double-quantized absmax as bitsandbytes' dequantize_blockwise then `+= offset` compute it:
// an f32 product, then an f32 add — two roundings, never fused (the baseline build has no FMA).
inline float BnbNestedScale(float map_value, float nested_absmax, float offset) {
  const float scaled = map_value * nested_absmax;
  return scaled + offset;
}

// bitsandbytes' create_dynamic_map() (signed, 8 bits): 256 f32 values, ascending — the nested
// quant_map of every double-quant checkpoint.
const float* BnbDynamicMap();

// Replaces `absmax` (f32 per 64-block, in the flattened weight's order) by what a double-quant
// checkpoint of it dequantizes to: offset = absmax.mean() as torch computes it on a CPU without
// AVX-512 kernels (its 8-lane cascade sum, then ÷ n; on a GPU or with torch's AVX-512 kernels
// the last bit can differ), each 256 of absmax − offset (f32)
// times 1/max|block| and quantized as bitsandbytes 0.50.2's CPU kernel does (a 65,536-bin table
// over [−1, 1], not the nearest map entry: bnb_double_quant.cc), then map[q] · max|block| +
// offset in f32 (dequantize_blockwise).
// Returns the offset.
float DoubleQuantizeAbsmax(std::vector<float>* absmax);

// The 8-bit dynamic-map code bitsandbytes 0.50.2's CPU quantize_blockwise gives a value already
// scaled by 1/absmax of its block (clamped to [−1, 1]): its 65,536-bin table, not the nearest map
// entry (up to 4 entries off it near 0).
int BnbDynamicCode(float normalized);

// torch.mean of n contiguous f32 values as torch computes it on one thread on a CPU without
// AVX-512 kernels (above 32,768 values torch splits the sum over its threads, so the last bit
// then depends on the quantizing process's thread count).
float TorchMeanF32(const float* x, int64_t n);

}  // namespace loom
