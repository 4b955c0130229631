// Tensor: a non-owning view {dtype, shape, data} over row-major memory; AlignedBuffer owns f32 scratch.
#pragma once

#include <sys/mman.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "tensor/dtype.h"

namespace loom {

struct Tensor {
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  const void* data = nullptr;  // row-major, contiguous

  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
  int64_t dim(int i) const { return shape[static_cast<size_t>(i)]; }
  int rank() const { return static_cast<int>(shape.size()); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * DTypeSize(dtype); }
  bool empty() const { return data == nullptr; }
};

std::string ShapeString(const std::vector<int64_t>& shape);  // "[4864, 896]"

// 64-byte aligned, zero-initialised array of T (cache-line/zmm aligned scratch). Arrays of 2 MiB
// and more (packed and quantized weights, the KV cache, large scratch) start on a 2 MiB boundary
// and are asked for transparent huge pages (madvise; Debian's default THP mode serves only
// those): a weight stream or a KV block then misses the TLB once per 2 MiB instead of once per
// 4 KiB. The size is not rounded up to 2 MiB: the last, partial 2 MiB stays on 4 KiB pages
// rather than committing up to 2 MiB more per array (docs/PERFORMANCE.md, "A bf16 KV cache").
// Thread-safety: none (owned by one thread or guarded by its owner).
template <typename T>
class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  // Grows to n elements (zeroed when new memory is taken; shrinking keeps the memory). An
  // impossible size or a failed allocation is kResourceExhausted and leaves the buffer as it was.
  Status Resize(size_t n) {
    if (n <= capacity_) {
      size_ = n;
      return OkStatus();
    }
    if (n > (std::numeric_limits<size_t>::max() - 63) / sizeof(T)) {
      return ResourceExhausted("cannot allocate " + std::to_string(n) + " elements of " +
                               std::to_string(sizeof(T)) + " bytes: the size overflows");
    }
    constexpr size_t kHuge = size_t{2} << 20;
    const bool huge = n * sizeof(T) >= kHuge;
    const size_t bytes = ((n * sizeof(T) + 63) / 64) * 64;
    void* raw = nullptr;  // posix_memalign: no size-multiple rule, unlike aligned_alloc
    T* p = ::posix_memalign(&raw, huge ? kHuge : 64, bytes == 0 ? 64 : bytes) == 0
               ? static_cast<T*>(raw)
               : nullptr;
    if (p == nullptr) {
      return ResourceExhausted("cannot allocate " + std::to_string(bytes) + " bytes (" +
                               std::to_string(bytes >> 20) + " MiB): out of memory");
    }
    if (huge) ::madvise(p, bytes, MADV_HUGEPAGE);  // advice only: without THP nothing changes
    std::memset(p, 0, bytes);
    ptr_.reset(p);
    size_ = capacity_ = n;
    return OkStatus();
  }
  T* data() { return ptr_.get(); }
  const T* data() const { return ptr_.get(); }
  size_t size() const { return size_; }
  T& operator[](size_t i) { return ptr_.get()[i]; }
  const T& operator[](size_t i) const { return ptr_.get()[i]; }

 private:
  struct Free {
    void operator()(T* p) const { std::free(p); }
  };
  std::unique_ptr<T, Free> ptr_;
  size_t size_ = 0;
  size_t capacity_ = 0;
};

}  // namespace loom
