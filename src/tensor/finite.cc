// FindNonFinite: exponent-mask scan per dtype, block by block.
#include "tensor/finite.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace loom {

namespace {

constexpr int64_t kBlock = 4096;  // elements per vectorised pass

// A value is NaN or ±Inf exactly when its exponent bits are all set, i.e. when its magnitude
// bits (sign cleared) are at least kExp. The block test is an unsigned max-reduction of the
// magnitudes, compiled for AVX-512BW, AVX2 and the baseline (picked at load by the dynamic
// linker), so the scan runs at memory speed; only a failing block is searched element by element.
// ThreadSanitizer instruments the clones' ifunc resolver, which the dynamic linker runs before
// the sanitizer's runtime is up (a crash at start-up): the tsan build scans with one clone.
#if defined(__SANITIZE_THREAD__)  // gcc
#define LOOM_NO_TARGET_CLONES 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)  // clang
#define LOOM_NO_TARGET_CLONES 1
#endif
#endif
#if defined(LOOM_NO_TARGET_CLONES)
#define LOOM_SCAN_CLONES
#else
#define LOOM_SCAN_CLONES [[gnu::target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")]]
#endif

template <typename Bits>
[[gnu::always_inline]] inline Bits MaxMagnitude(const Bits* p, int64_t len, Bits abs_mask) {
  Bits top = 0;
  for (int64_t i = 0; i < len; ++i) top = std::max<Bits>(top, p[i] & abs_mask);
  return top;
}

LOOM_SCAN_CLONES uint16_t MaxMagnitude16(const uint16_t* p, int64_t len, uint16_t abs_mask) {
  return MaxMagnitude<uint16_t>(p, len, abs_mask);
}

LOOM_SCAN_CLONES uint32_t MaxMagnitude32(const uint32_t* p, int64_t len, uint32_t abs_mask) {
  return MaxMagnitude<uint32_t>(p, len, abs_mask);
}

inline uint16_t BlockMax(const uint16_t* p, int64_t len, uint16_t m) {
  return MaxMagnitude16(p, len, m);
}
inline uint32_t BlockMax(const uint32_t* p, int64_t len, uint32_t m) {
  return MaxMagnitude32(p, len, m);
}

template <typename Bits, Bits kAbs, Bits kExp>
int64_t Scan(const void* data, int64_t n) {
  const auto* bytes = static_cast<const unsigned char*>(data);
  const bool aligned = reinterpret_cast<uintptr_t>(data) % sizeof(Bits) == 0;
  alignas(64) Bits copy[kBlock];
  for (int64_t start = 0; start < n; start += kBlock) {
    const int64_t len = std::min(kBlock, n - start);
    const Bits* p = reinterpret_cast<const Bits*>(bytes + start * int64_t(sizeof(Bits)));
    if (!aligned) {  // bytes of an mmap'd file at an odd offset: loaded with memcpy, no UB
      std::memcpy(copy, bytes + start * int64_t(sizeof(Bits)),
                  static_cast<size_t>(len) * sizeof(Bits));
      p = copy;
    }
    if (BlockMax(p, len, kAbs) < kExp) continue;
    for (int64_t i = 0; i < len; ++i) {
      if ((p[i] & kAbs) >= kExp) return start + i;
    }
  }
  return -1;
}

}  // namespace

int64_t FindNonFinite(DType dtype, const void* data, int64_t n) {
  if (n <= 0 || data == nullptr) return -1;
  switch (dtype) {
    case DType::kF32:
      return Scan<uint32_t, 0x7FFFFFFFu, 0x7F800000u>(data, n);
    case DType::kF16:
      return Scan<uint16_t, 0x7FFF, 0x7C00>(data, n);
    case DType::kBF16:
      return Scan<uint16_t, 0x7FFF, 0x7F80>(data, n);
  }
  return -1;
}

Status CheckTensorFinite(const Tensor& t, std::string_view name, std::string_view where) {
  const int64_t bad = FindNonFinite(t.dtype, t.data, t.numel());
  if (bad < 0) return OkStatus();
  return NonFiniteError(t, bad, name, where);
}

Status NonFiniteError(const Tensor& t, int64_t bad, std::string_view name, std::string_view where) {
  float value = 0;
  ConvertToF32(t.dtype, static_cast<const uint8_t*>(t.data) + bad * int64_t(DTypeSize(t.dtype)),
               &value, 1);
  std::string what = std::isnan(value) ? "NaN" : (value > 0 ? "+Inf" : "-Inf");
  std::string at = "index " + std::to_string(bad);
  if (t.rank() == 2 && t.dim(1) > 0) {
    at += " (row " + std::to_string(bad / t.dim(1)) + ", column " + std::to_string(bad % t.dim(1)) +
          ")";
  }
  return InvalidArgument(std::string(where) + (where.empty() ? "" : ": ") + "tensor '" +
                         std::string(name) + "' (" + ShapeString(t.shape) + " " +
                         DTypeName(t.dtype) + ") has " + what + " at " + at +
                         "; loom refuses non-finite weights (--no-check-weights skips this check)");
}

}  // namespace loom
