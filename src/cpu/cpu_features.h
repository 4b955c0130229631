// Which SIMD level this CPU runs; chosen once from cpuid (LOOM_ISA=scalar|avx2|avx512 overrides).
#pragma once

namespace loom::cpu {

enum class Isa { kScalar, kAvx2, kAvx512 };  // kAvx512 means F+BW+VL+DQ+BF16

Isa DetectIsa();        // what the hardware supports
Isa ActiveIsa();        // DetectIsa() capped by LOOM_ISA, cached
void SetActiveIsa(Isa isa);  // tests: run every level the machine supports
const char* IsaName(Isa isa);

}  // namespace loom::cpu
