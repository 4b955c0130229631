// SipHash-2-4 (the reference algorithm, little-endian words) and the process key.
#include "base/siphash.h"

#include <sys/random.h>

#include <chrono>
#include <cstdio>
#include <cstring>

namespace loom {

namespace {

inline uint64_t Rotl(uint64_t x, int b) { return (x << b) | (x >> (64 - b)); }

inline void SipRound(uint64_t v[4]) {
  v[0] += v[1];
  v[1] = Rotl(v[1], 13);
  v[1] ^= v[0];
  v[0] = Rotl(v[0], 32);
  v[2] += v[3];
  v[3] = Rotl(v[3], 16);
  v[3] ^= v[2];
  v[0] += v[3];
  v[3] = Rotl(v[3], 21);
  v[3] ^= v[0];
  v[2] += v[1];
  v[1] = Rotl(v[1], 17);
  v[1] ^= v[2];
  v[2] = Rotl(v[2], 32);
}

}  // namespace

SipHasher::SipHasher(const SipKey& key)
    : v_{key.k0 ^ 0x736f6d6570736575ull, key.k1 ^ 0x646f72616e646f6dull,
         key.k0 ^ 0x6c7967656e657261ull, key.k1 ^ 0x7465646279746573ull} {}

void SipHasher::Compress(uint64_t m) {
  v_[3] ^= m;
  SipRound(v_);
  SipRound(v_);
  v_[0] ^= m;
}

void SipHasher::Update(const void* data, size_t size) {
  const auto* p = static_cast<const uint8_t*>(data);
  size_t pending = total_ % 8;
  total_ += size;
  // Fill the pending word first.
  while (pending != 0 && size != 0) {
    tail_ |= static_cast<uint64_t>(*p++) << (8 * pending);
    --size;
    if (++pending == 8) {
      Compress(tail_);
      tail_ = 0;
      pending = 0;
    }
  }
  for (; size >= 8; size -= 8, p += 8) {
    uint64_t m;
    std::memcpy(&m, p, 8);  // little-endian hosts only (x86-64)
    Compress(m);
  }
  for (size_t i = 0; i < size; ++i) tail_ |= static_cast<uint64_t>(p[i]) << (8 * i);
}

uint64_t SipHasher::Final() {
  Compress(tail_ | (static_cast<uint64_t>(total_ & 0xff) << 56));
  v_[2] ^= 0xff;
  for (int i = 0; i < 4; ++i) SipRound(v_);
  return v_[0] ^ v_[1] ^ v_[2] ^ v_[3];
}

uint64_t SipHash24(const SipKey& key, const void* data, size_t size) {
  SipHasher h(key);
  h.Update(data, size);
  return h.Final();
}

const SipKey& ProcessSipKey() {
  static const SipKey key = [] {
    SipKey k;
    uint64_t words[2];
    if (::getrandom(words, sizeof(words), 0) == static_cast<ssize_t>(sizeof(words))) {
      k.k0 = words[0];
      k.k1 = words[1];
      return k;
    }
    // No entropy from the kernel: the clock and an address (ASLR), said — weaker, never a
    // failure.
    std::fprintf(stderr, "warning: getrandom failed; prefix-cache keys use a weaker key\n");
    const auto t =
        static_cast<uint64_t>(std::chrono::high_resolution_clock::now().time_since_epoch().count());
    k.k0 = t * 0x9E3779B97F4A7C15ull ^ reinterpret_cast<uintptr_t>(&k);
    k.k1 = SipHash24(k, &t, sizeof(t));
    return k;
  }();
  return key;
}

}  // namespace loom
