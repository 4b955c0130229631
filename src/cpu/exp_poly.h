// Constants of the vectorized exp(x ≤ 0) that the AVX-512 and AVX2 attention kernels share: Cephes' expf (≤ 2 ulp).
#pragma once

namespace loom::cpu::exp_poly {

// x = n·ln2 + r with n = round(x·log2(e)); ln2 split in two so that n·ln2 is exact enough.
inline constexpr float kLog2e = 1.44269504088896341f;
inline constexpr float kLn2Hi = 0.693359375f;
inline constexpr float kLn2Lo = -2.12194440e-4f;
// Below this exp underflows; such lanes give 0.
inline constexpr float kMinInput = -87.33654f;
// exp(r) ≈ 1 + r + r²·P(r), P's coefficients from the highest degree down (Horner).
inline constexpr float kP[6] = {1.9875691500e-4f, 1.3981999507e-3f, 8.3334519073e-3f,
                                4.1665795894e-2f, 1.6666665459e-1f, 5.0000001201e-1f};

}  // namespace loom::cpu::exp_poly
