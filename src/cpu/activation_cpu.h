// CPU kernels for SiLU(gate)·up, one function per ISA level.
#pragma once

#include <cstdint>

#include "cpu/cpu_features.h"

namespace loom::cpu {

// gate[i] = gate[i] / (1 + e^−gate[i]) · up[i] for i < count.
void SiluMul(Isa isa, float* gate, const float* up, int64_t count);
void SiluMulScalar(float* gate, const float* up, int64_t count);
void SiluMulAvx512(float* gate, const float* up, int64_t count);
void SiluMulAvx2(float* gate, const float* up, int64_t count);

}  // namespace loom::cpu
