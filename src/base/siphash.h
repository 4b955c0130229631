// SipHash-2-4 (Aumasson & Bernstein): a keyed 64-bit PRF for tables whose keys clients choose,
// and the process's secret key for it (prefix-cache block keys, adapter cache identities).
#pragma once

#include <cstddef>
#include <cstdint>

namespace loom {

struct SipKey {
  uint64_t k0 = 0, k1 = 0;
};

// Incremental SipHash-2-4: Update any number of times, then Final (once).
class SipHasher {
 public:
  explicit SipHasher(const SipKey& key);
  void Update(const void* data, size_t size);
  uint64_t Final();

 private:
  void Compress(uint64_t m);
  uint64_t v_[4];
  uint64_t tail_ = 0;  // the pending bytes (< 8), little-endian
  size_t total_ = 0;   // bytes seen
};

uint64_t SipHash24(const SipKey& key, const void* data, size_t size);

// This process's key: 128 random bits drawn once (getrandom(2); a warning if it fails), so
// nobody outside the process can compute colliding inputs for it in advance.
const SipKey& ProcessSipKey();

}  // namespace loom
