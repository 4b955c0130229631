// Which SIMD level this CPU runs; chosen once from cpuid (LOOM_ISA=amx|avx512bf16|avx512|avx2|scalar caps it).
#pragma once

namespace loom::cpu {

// Each level adds to the one below: kAvx2 = AVX2+FMA+F16C; kAvx512 = F+BW+VL+DQ (bf16 weights
// widened to f32 in registers); kAvx512Bf16 adds the AVX512_BF16 dot product (vdpbf16ps);
// kAmx adds AMX-BF16 tiles (granted by the kernel).
enum class Isa { kScalar, kAvx2, kAvx512, kAvx512Bf16, kAmx };

Isa DetectIsa();        // what the hardware supports
Isa ActiveIsa();        // DetectIsa() capped by LOOM_ISA, cached
void SetActiveIsa(Isa isa);  // tests: run every level the machine supports
const char* IsaName(Isa isa);

// The LOOM_ISA value `value` capping `detected`: false (and *out untouched) when `value` names
// no level. A level above `detected` yields `detected`.
bool ParseIsaCap(const char* value, Isa detected, Isa* out);

}  // namespace loom::cpu
