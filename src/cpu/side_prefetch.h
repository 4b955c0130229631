// Memory a matmul's block epilogue will read (a LoRA expand's B panels), prefetched one cache line per step from inside the kernel's loop while it computes.
#pragma once

#include <cstdint>

namespace loom::cpu {

// Up to kMaxRanges byte ranges, issued in order, one 64-byte line per Next(): spread over a
// compute-bound kernel's loop, the lines arrive while it computes, where the same bytes read by
// the epilogue after the block (short streams from DRAM) waited on each miss in turn.
struct SidePrefetch {
  static constexpr int kMaxRanges = 16;
  const char* begin[kMaxRanges] = {};
  int64_t bytes[kMaxRanges] = {};
  int count = 0;
  int at = 0;          // the range being issued
  int64_t offset = 0;  // into it

  // Ranges past kMaxRanges are left to the hardware.
  void Add(const void* p, int64_t n) {
    if (count == kMaxRanges || n <= 0) return;
    begin[count] = static_cast<const char*>(p);
    bytes[count++] = n;
  }
  // The next line into L2 (the block's expand reads it soon after; L1 is the kernel's).
  void Next() {
    if (at == count) return;
    __builtin_prefetch(begin[at] + offset, 0, 2);
    offset += 64;
    if (offset >= bytes[at]) {
      ++at;
      offset = 0;
    }
  }
};

}  // namespace loom::cpu
