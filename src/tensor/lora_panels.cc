// Packs lora_B [out, rank] into the expand kernels' panels of 16 columns.
#include "tensor/lora_panels.h"

#include <cstring>

namespace loom {

void PackLoraPanels(DType dtype, const void* b, int rank, int64_t out, void* panels) {
  const size_t es = DTypeSize(dtype);
  std::memset(panels, 0, static_cast<size_t>(LoraPanelsSize(rank, out)) * es);
  auto pack = [&](auto* dst, const auto* src) {
    for (int64_t j = 0; j < out; ++j) {
      for (int k = 0; k < rank; ++k) dst[LoraPanelIndex(rank, k, j)] = src[j * rank + k];
    }
  };
  if (es == 4) {
    pack(static_cast<uint32_t*>(panels), static_cast<const uint32_t*>(b));
  } else {
    pack(static_cast<uint16_t*>(panels), static_cast<const uint16_t*>(b));
  }
}

}  // namespace loom
