// Row-wise ops of the Llama block: RMSNorm, SiLU·mul, residual add, embedding gather.
#pragma once

#include <cstdint>

#include "tensor/tensor.h"

namespace loom {

// out[r, :] = weight ⊙ x[r, :] / sqrt(mean(x[r, :]²) + eps). x, out: [n, d] f32 (may alias);
// weight: [d] f32. Same order of operations as transformers' LlamaRMSNorm.
void RmsNorm(const float* x, int64_t n, int64_t d, const float* weight, double eps, float* out);

// gate[r, i] = silu(gate[r, i]) * up[r, i]; gate, up: [n, f] f32. silu(v) = v / (1 + e^-v).
void SiluMulInPlace(float* gate, const float* up, int64_t count);

// gate[r, i] = gelu_tanh(gate[r, i]) * up[r, i] (GeGLU, transformers' gelu_pytorch_tanh):
// 0.5·v·(1 + tanh(√(2/π)·(v + 0.044715·v³))) in f32, PyTorch's order of operations.
void GeluTanhMulInPlace(float* gate, const float* up, int64_t count);

// gate[r, i] = gelu(gate[r, i]) * up[r, i] with the exact GELU (transformers' "gelu",
// torch.nn.functional.gelu): v·0.5·(1 + erf(v·√½)) in f32, PyTorch's order of operations.
void GeluErfMulInPlace(float* gate, const float* up, int64_t count);

// x[i] = tanh(x[i] / cap) · cap (Gemma's logit soft-capping), cap > 0.
void SoftCapInPlace(float* x, int64_t count, float cap);

// x[i] *= s.
void ScaleInPlace(float* x, int64_t count, float s);

// x[i] += y[i].
void AddInPlace(float* x, const float* y, int64_t count);

// out[r, :] = table[ids[r], :] as f32. table: [vocab, d] (any dtype); out: [n, d].
void EmbedRows(const Tensor& table, const int32_t* ids, int64_t n, float* out);

// The greedy scan of a logits row x [n]: *bad = the first i with x[i] NaN or +inf (−1: none);
// if none, *best = the first i with the largest x[i] above −inf (−1: all −inf or n = 0), else −1.
void ScanLogitsRow(const float* x, int64_t n, int64_t* best, int64_t* bad);

// Σ_i exp(double(x[i] − mx)) over x [n]: log-softmax's normaliser (cpu/logits_scan_cpu.h).
double SumExpShifted(const float* x, int64_t n, float mx);

// p[i] = exp(x[i]·s − mx) over x [n]; returns Σ p[i] in double (cpu/sample_cpu.h).
double ExpScaledRow(const float* x, int64_t n, float s, float mx, float* p);

// The index a draw u ∈ [0, Σ p) picks by cumulative mass in index order (cpu/sample_cpu.h).
int64_t DrawByMassRow(const float* p, int64_t n, double u);

// Converts a small tensor (norm weights, biases) to an owned f32 vector.
void ToF32(const Tensor& t, float* out);

}  // namespace loom
