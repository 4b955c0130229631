// Element types of weights and activations, and scalar conversions between them.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>

namespace loom {

enum class DType { kF32, kF16, kBF16 };

size_t DTypeSize(DType dtype);
const char* DTypeName(DType dtype);  // safetensors spelling: "F32", "F16", "BF16"

inline float Bf16ToF32(uint16_t h) {
  uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Round to nearest even, as torch does for .to(torch.bfloat16); NaN stays NaN.
inline uint16_t F32ToBf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

float F16ToF32(uint16_t h);
uint16_t F32ToF16(float f);  // round to nearest even, overflow to inf

// Converts n elements of `src` (of dtype) to f32.
void ConvertToF32(DType dtype, const void* src, float* dst, int64_t n);
// Converts n f32 values to dtype (rounding to nearest even).
void ConvertFromF32(DType dtype, const float* src, void* dst, int64_t n);

}  // namespace loom
