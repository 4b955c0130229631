// The LoRA expand's layout of lora_B: panels of 16 output columns, so a column block is one contiguous run of memory.
#pragma once

#include <cstdint>

#include "tensor/dtype.h"

namespace loom {

// The expand's layout of B [out, rank] (PEFT's lora_B): panels of kLoraPanel output columns,
// element (k, j) at LoraPanelIndex(rank, k, j) = ((j / 16)·rank + k)·16 + j % 16, zero past
// `out`. A column block [j0, j1) is then one contiguous run of memory — one stream for the
// hardware prefetcher — where Bᵀ [rank, out] made a decode row's block 16 short streams, one
// per rank. A 16-column panel row is one AVX-512 vector or two AVX2 ones.
inline constexpr int64_t kLoraPanel = 16;
inline int64_t LoraPanelIndex(int rank, int k, int64_t j) {
  return ((j / kLoraPanel) * rank + k) * kLoraPanel + j % kLoraPanel;
}
// Elements of the packed form (a whole number of panels).
inline int64_t LoraPanelsSize(int rank, int64_t out) {
  return (out + kLoraPanel - 1) / kLoraPanel * kLoraPanel * rank;
}
// The packed elements a column block [j0, j1) reads: [first, first + count).
struct LoraPanelRange {
  int64_t first, count;
};
inline LoraPanelRange LoraPanelsOf(int rank, int64_t j0, int64_t j1) {
  const int64_t p0 = j0 / kLoraPanel, p1 = (j1 + kLoraPanel - 1) / kLoraPanel;
  return {p0 * kLoraPanel * rank, (p1 - p0) * kLoraPanel * rank};
}
// b: [out, rank] of `dtype` (F32/F16/BF16, copied bit for bit); panels: LoraPanelsSize elements.
void PackLoraPanels(DType dtype, const void* b, int rank, int64_t out, void* panels);

}  // namespace loom
