// cpuid-based ISA detection.
#include "cpu/cpu_features.h"

#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include <cstdlib>
#include <cstring>

#include "cpu/matmul_cpu.h"

namespace loom::cpu {

namespace {
Isa g_active = static_cast<Isa>(-1);

#if defined(__x86_64__)
// CPUID.1:ECX bit 29. Read directly: clang 14's __builtin_cpu_supports has no "f16c".
bool HasF16c() {
  unsigned int eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & (1u << 29)) != 0;
}
#endif
}  // namespace

Isa DetectIsa() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("avx512bf16")) {
    return AmxAvailable() ? Isa::kAmx : Isa::kAvx512;
  }
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && HasF16c()) {
    return Isa::kAvx2;
  }
#endif
  return Isa::kScalar;
}

Isa ActiveIsa() {
  if (g_active == static_cast<Isa>(-1)) {
    Isa isa = DetectIsa();
    if (const char* env = std::getenv("LOOM_ISA")) {
      if (std::strcmp(env, "scalar") == 0) isa = Isa::kScalar;
      if (std::strcmp(env, "avx2") == 0 && isa >= Isa::kAvx2) isa = Isa::kAvx2;
      if (std::strcmp(env, "avx512") == 0 && isa >= Isa::kAvx512) isa = Isa::kAvx512;
    }
    g_active = isa;
  }
  return g_active;
}

void SetActiveIsa(Isa isa) { g_active = isa; }

const char* IsaName(Isa isa) {
  switch (isa) {
    case Isa::kScalar: return "scalar";
    case Isa::kAvx2: return "avx2";
    case Isa::kAvx512: return "avx512";
    case Isa::kAmx: return "amx";
  }
  return "?";
}

}  // namespace loom::cpu
