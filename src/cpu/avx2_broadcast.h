// Four bytes broadcast to every 32-bit lane of a ymm, shared by the avx2-level int kernels (one activation group per vpmaddubsw/vpdpbusd lane).
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

namespace loom::cpu {

__attribute__((target("avx2"))) inline __m256i Broadcast4(const void* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}

}  // namespace loom::cpu
