// cpuid-based ISA detection.
#include "cpu/cpu_features.h"

#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include <atomic>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "cpu/matmul_cpu.h"

namespace loom::cpu {

namespace {
// SetActiveIsa's level (tests), or -1. Atomic: ActiveIsa is read by every kernel call on the
// pool's workers while the engine thread may be the first to ask (a plain global written on
// first use was a data race under ThreadSanitizer, and could print LOOM_ISA's warning twice).
std::atomic<int> g_override{-1};

#if defined(__x86_64__)
// CPUID.1:ECX bit 29. Read directly: clang 14's __builtin_cpu_supports has no "f16c".
bool HasF16c() {
  unsigned int eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & (1u << 29)) != 0;
}
#endif

std::string ToLower(const char* s) {
  std::string out;
  for (; *s != '\0' && out.size() < 64; ++s) {
    out += static_cast<char>(std::tolower(static_cast<unsigned char>(*s)));
  }
  return out;
}
}  // namespace

Isa DetectIsa() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq")) {
    if (!__builtin_cpu_supports("avx512bf16")) return Isa::kAvx512;
    return AmxAvailable() ? Isa::kAmx : Isa::kAvx512Bf16;
  }
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && HasF16c()) {
    return Isa::kAvx2;
  }
#endif
  return Isa::kScalar;
}

namespace {
// DetectIsa() capped by LOOM_ISA, once per process (a function-local static: thread-safe).
Isa DetectedCapped() {
  static const Isa active = [] {
    Isa isa = DetectIsa();
    if (const char* env = std::getenv("LOOM_ISA"); env != nullptr && *env != '\0') {
      Isa capped = isa;
      if (!ParseIsaCap(env, isa, &capped)) {
        std::fprintf(stderr,
                     "loom: warning: LOOM_ISA=%s is not one of amx|avx512bf16|avx512|avx2|scalar; "
                     "ignored, using %s\n", env, IsaName(isa));
      } else if (capped == isa && ToLower(env) != IsaName(isa)) {  // asked for more than the CPU has
        std::fprintf(stderr, "loom: warning: LOOM_ISA=%s but this CPU supports at most %s; using %s\n",
                     env, IsaName(isa), IsaName(isa));
      }
      isa = capped;
    }
    return isa;
  }();
  return active;
}
}  // namespace

Isa ActiveIsa() {
  const int forced = g_override.load(std::memory_order_relaxed);
  return forced >= 0 ? static_cast<Isa>(forced) : DetectedCapped();
}

void SetActiveIsa(Isa isa) { g_override.store(static_cast<int>(isa), std::memory_order_relaxed); }

const char* IsaName(Isa isa) {
  switch (isa) {
    case Isa::kScalar: return "scalar";
    case Isa::kAvx2: return "avx2";
    case Isa::kAvx512: return "avx512";
    case Isa::kAvx512Bf16: return "avx512bf16";
    case Isa::kAmx: return "amx";
  }
  return "?";
}

bool ParseIsaCap(const char* value, Isa detected, Isa* out) {
  const std::string v = ToLower(value);
  for (Isa level : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512, Isa::kAvx512Bf16, Isa::kAmx}) {
    if (v == IsaName(level)) {
      *out = level < detected ? level : detected;
      return true;
    }
  }
  return false;
}

}  // namespace loom::cpu
