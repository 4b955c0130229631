// Which int8/int4 kernel an ISA level runs: AVX-VNNI detection (cpuid) and the level → kernel rule.
#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "cpu/int8_cpu.h"

namespace loom::cpu {

bool HasAvxVnni() {
#if defined(__x86_64__)
  static const bool has = [] {
    unsigned int eax = 0, ebx = 0, ecx = 0, edx = 0;
    // CPUID.(EAX=7, ECX=1):EAX bit 4. The OS's ymm state is checked with the kAvx2 level.
    if (__get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx) == 0 || (eax & (1u << 4)) == 0) return false;
    const char* env = std::getenv("LOOM_AVXVNNI");
    if (env == nullptr || std::strcmp(env, "1") == 0) return true;
    if (std::strcmp(env, "0") == 0) return false;
    // As LOOM_ISA: a value that is not used is said, not read as "on" ("off", "false").
    std::fprintf(stderr, "warning: LOOM_AVXVNNI='%.40s' is not 0 or 1; using AVX-VNNI\n", env);
    return true;
  }();
  return has;
#else
  return false;
#endif
}

namespace {
std::atomic<int> g_int_kernel_cap{-1};  // -1: none
}  // namespace

void SetIntKernelCapForTesting(IntKernel kernel, bool reset) {
  g_int_kernel_cap.store(reset ? -1 : static_cast<int>(kernel));
}

IntKernel IntKernelFor(Isa isa) {
  IntKernel kernel = IntKernel::kScalar;
  if (isa >= Isa::kAvx512 && HasAvx512Vnni()) {
    kernel = IntKernel::kAvx512Vnni;
  } else if (isa >= Isa::kAvx2) {
    kernel = HasAvxVnni() ? IntKernel::kAvxVnni : IntKernel::kAvx2;
  }
  const int cap = g_int_kernel_cap.load(std::memory_order_relaxed);
  return cap >= 0 && cap < static_cast<int>(kernel) ? static_cast<IntKernel>(cap) : kernel;
}

bool UseAmxInt(int64_t rows) {
  return rows >= kAmxIntMinRows && ActiveIsa() >= Isa::kAmx && HasAmxInt8();
}

const char* IntKernelName(IntKernel kernel) {
  switch (kernel) {
    case IntKernel::kScalar: return "scalar";
    case IntKernel::kAvx2: return "avx2";
    case IntKernel::kAvxVnni: return "avxvnni";
    case IntKernel::kAvx512Vnni: return "avx512vnni";
  }
  return "?";
}

}  // namespace loom::cpu
