// Finite check of weights (no NaN / ±Inf) for untrusted checkpoints and adapters.
#pragma once

#include <cstdint>
#include <string_view>

#include "base/status.h"
#include "tensor/tensor.h"

namespace loom {

// Index of the first NaN or ±Inf among `n` values of `dtype` at `data` (any alignment), or -1.
// Bandwidth-bound: whole blocks are tested with a vectorised max over the magnitude bits, and
// only a block that fails is searched element by element.
int64_t FindNonFinite(DType dtype, const void* data, int64_t n);

// kInvalidArgument naming the tensor, the first bad flat index and its row/column:
//   "tensor 'model.layers.0.mlp.up_proj.weight' ([64, 32] bf16) has NaN at index 70 (row 2,
//   column 6)". `where` leads the message (a file path, "adapter 'sql'").
Status CheckTensorFinite(const Tensor& t, std::string_view name, std::string_view where);

// The error CheckTensorFinite returns when flat index `bad` of `t` is not finite (for callers
// that scan a tensor in parallel chunks with FindNonFinite).
Status NonFiniteError(const Tensor& t, int64_t bad, std::string_view name, std::string_view where);

}  // namespace loom
