// bitsandbytes 8-bit (LLM.int8) projection tensors → loom's Int8Weight: CB, SCB and weight_format
// checked, SCB kept as the row scale (W = CB · SCB · (1/127) as bitsandbytes dequantizes it), the
// outlier threshold kept.
#include <cmath>
#include <cstring>
#include <vector>

#include "base/mmap_file.h"
#include "model/bnb.h"
#include "model/tensor_need.h"

namespace loom {

Status LoadBnb8Linear(const SafetensorsStore& store, const BnbConfig& config, int64_t out,
                      int64_t in, Linear* lin, std::set<std::string>* consumed, uint64_t* bytes) {
  const std::string w = lin->name + ".weight";
  const TensorInfo* scb_info = store.Find(lin->name + ".SCB");
  if (!scb_info) {
    return InvalidArgument("checkpoint " + store.source() + ": missing tensor '" + lin->name +
                           ".SCB' (the row scales of a bitsandbytes 8-bit weight)");
  }
  if (config.Skipped(lin->name)) {
    return InvalidArgument(scb_info->file + ": tensor '" + scb_info->name + "' quantizes " +
                           lin->name +
                           ", which quantization_config's llm_int8_skip_modules keeps dense");
  }
  for (const char* four_bit : {".weight.absmax", ".weight.quant_state.bitsandbytes__nf4",
                               ".weight.quant_state.bitsandbytes__fp4"}) {
    if (const TensorInfo* t = store.Find(lin->name + four_bit)) {
      return InvalidArgument(t->file + ": tensor '" + t->name +
                             "' belongs to a bitsandbytes 4-bit weight, but quantization_config "
                             "is load_in_8bit");
    }
  }
  const std::string why = "bitsandbytes LLM.int8 of " + lin->name + " " + ShapeString({out, in});
  ASSIGN_OR_RETURN(const TensorInfo* cb, NeedTensor(store, w, {"I8"}, {out, in}, why, consumed));
  ASSIGN_OR_RETURN(const TensorInfo* scb,
                   NeedTensor(store, lin->name + ".SCB", {"F32"}, {out}, why, consumed));
  if (store.Find(lin->name + ".weight_format")) {
    ASSIGN_OR_RETURN(const TensorInfo* fmt, NeedTensor(store, lin->name + ".weight_format", {"U8"},
                                                       {}, why, consumed));
    if (fmt->data[0] != 0) {
      return InvalidArgument(fmt->file + ": tensor '" + fmt->name + "' is " +
                             std::to_string(fmt->data[0]) +
                             ": a tiled (col32 / turing / ampere) layout of old bitsandbytes; "
                             "loom reads the row-major layout (0) bitsandbytes saves today");
    }
  }
  std::vector<float> scale(static_cast<size_t>(out));
  for (int64_t j = 0; j < out; ++j) {
    float s;
    std::memcpy(&s, scb->data + 4 * j, 4);
    if (!std::isfinite(s) || s < 0) {
      return InvalidArgument(scb->file + ": tensor '" + scb->name + "' row " + std::to_string(j) +
                             " is " + std::to_string(s) + ", not a finite absmax ≥ 0");
    }
    scale[static_cast<size_t>(j)] = s;  // llm_int8: the scale is SCB (Int8Weight)
  }
  ASSIGN_OR_RETURN(std::unique_ptr<Int8Weight> q,
                   Int8WeightFromRows(reinterpret_cast<const int8_t*>(cb->data), scale.data(), out,
                                      in, cb->file + ": " + w + " (" + why + ")"));
  q->llm_int8 = true;
  q->outlier_threshold = config.threshold;
  if (bytes) *bytes += q->bytes();
  lin->int8 = std::move(q);
  ReleaseMappedPages(cb->data, cb->nbytes);               // never read again
  lin->weight = Tensor{DType::kF32, {out, in}, nullptr};  // shape only: no dense weight
  return OkStatus();
}

}  // namespace loom
