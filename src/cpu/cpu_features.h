// Which SIMD level this CPU runs; chosen once from cpuid (LOOM_ISA=scalar|avx2|avx512 caps it).
#pragma once

namespace loom::cpu {

// kAvx512 means F+BW+VL+DQ+BF16; kAmx adds AMX-BF16 tiles (granted by the kernel).
enum class Isa { kScalar, kAvx2, kAvx512, kAmx };

Isa DetectIsa();        // what the hardware supports
Isa ActiveIsa();        // DetectIsa() capped by LOOM_ISA, cached
void SetActiveIsa(Isa isa);  // tests: run every level the machine supports
const char* IsaName(Isa isa);

}  // namespace loom::cpu
