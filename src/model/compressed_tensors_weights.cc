// compressed-tensors projection tensors → loom's Int8Weight / Int4Weight, every dtype, shape and value range checked before use.
#include <cmath>
#include <cstring>

#include "base/mmap_file.h"
#include "cpu/int4_cpu.h"
#include "cpu/int8_cpu.h"
#include "model/compressed_tensors.h"
#include "model/tensor_need.h"
#include "ops/basic_ops.h"
#include "tensor/dtype.h"

namespace loom {

namespace {


// Scales as f32, each finite and ≥ 0 (compressed-tensors never writes a negative scale), or of
// either sign when `signed_ok`: int4 group scales, where `loom quantize` writes loom's own rule
// d = m / −8 (the sign of the group's largest-magnitude value m; a positive scale could not hold
// q = −8·sign(m) as −8..7). Dequantization is d · q either way, in compressed-tensors too.
StatusOr<std::vector<float>> Scales(const TensorInfo& t, bool signed_ok = false) {
  const int64_t n = t.nbytes / DTypeSize(*t.dtype);
  std::vector<float> s(static_cast<size_t>(n));
  ConvertToF32(*t.dtype, t.data, s.data(), n);
  for (int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(s[static_cast<size_t>(i)]) || (!signed_ok && s[static_cast<size_t>(i)] < 0)) {
      return InvalidArgument(t.file + ": tensor '" + t.name + "' has scale " +
                             std::to_string(s[static_cast<size_t>(i)]) + " at index " +
                             std::to_string(i) + (signed_ok ? " (scales must be finite)"
                                                            : " (scales must be finite and ≥ 0)"));
    }
  }
  return s;
}

Status RejectExtras(const SafetensorsStore& store, const std::string& name, const std::string& scheme) {
  for (const char* extra : {".weight_zero_point", ".weight_g_idx", ".input_scale", ".input_zero_point",
                            ".weight_global_scale", ".input_global_scale"}) {
    if (const TensorInfo* t = store.Find(name + extra)) {
      return InvalidArgument(t->file + ": tensor '" + t->name + "' is not part of " + scheme +
                             " (zero points, g_idx and static input scales are not supported)");
    }
  }
  return OkStatus();
}

Status LoadInt8(const SafetensorsStore& store, const std::string& name, const std::string& scheme,
                int64_t out, int64_t in, Linear* lin, std::set<std::string>* consumed) {
  RETURN_IF_ERROR(CheckKernelDepth(name, in, "int8"));
  ASSIGN_OR_RETURN(const TensorInfo* q, NeedTensor(store, name + ".weight", {"I8"}, {out, in}, scheme, consumed));
  ASSIGN_OR_RETURN(const TensorInfo* sc, NeedTensor(store, name + ".weight_scale", {"F32", "F16", "BF16"},
                                              {out, 1}, scheme, consumed));
  ASSIGN_OR_RETURN(std::vector<float> scale, Scales(*sc));
  ASSIGN_OR_RETURN(std::unique_ptr<Int8Weight> w,
                   Int8WeightFromRows(reinterpret_cast<const int8_t*>(q->data), scale.data(), out,
                                      in, q->file + ": tensor '" + q->name + "'"));
  lin->int8 = std::move(w);
  ReleaseMappedPages(q->data, q->nbytes);  // never read again: RSS holds loom's copy only
  return OkStatus();
}

Status LoadInt4(const SafetensorsStore& store, const std::string& name, const std::string& scheme,
                int group, int64_t out, int64_t in, Linear* lin, std::set<std::string>* consumed) {
  if (in % group != 0) {
    return InvalidArgument(name + ": " + std::to_string(in) + " input features (config.json) are "
                           "not a multiple of " + scheme + "'s group_size " + std::to_string(group));
  }
  RETURN_IF_ERROR(CheckKernelDepth(name, in, "int4"));
  const int64_t words = in / 8;  // group_size ≥ 32, so whole words
  ASSIGN_OR_RETURN(const TensorInfo* packed, NeedTensor(store, name + ".weight_packed", {"I32"},
                                                  {out, words}, scheme, consumed));
  ASSIGN_OR_RETURN(const TensorInfo* shape, NeedTensor(store, name + ".weight_shape", {"I64", "I32"}, {2},
                                                 scheme, consumed));
  int64_t dims[2];
  for (int d = 0; d < 2; ++d) {
    if (shape->dtype_name == "I64") {
      std::memcpy(&dims[d], shape->data + 8 * d, 8);
    } else {
      int32_t v;
      std::memcpy(&v, shape->data + 4 * d, 4);
      dims[d] = v;
    }
  }
  if (dims[0] != out || dims[1] != in) {
    return InvalidArgument(shape->file + ": tensor '" + shape->name + "' says [" +
                           std::to_string(dims[0]) + ", " + std::to_string(dims[1]) +
                           "], the config needs " + ShapeString({out, in}));
  }
  ASSIGN_OR_RETURN(const TensorInfo* sc, NeedTensor(store, name + ".weight_scale", {"F16", "BF16", "F32"},
                                              {out, in / group}, scheme, consumed));
  ASSIGN_OR_RETURN(std::vector<float> scale, Scales(*sc, /*signed_ok=*/true));
  const int64_t file_groups = in / group;
  std::vector<uint16_t> scale16(scale.size());
  for (int64_t j = 0; j < out; ++j) {
    for (int64_t g = 0; g < file_groups; ++g) {
      const float s = scale[static_cast<size_t>(j * file_groups + g)];
      const uint16_t h = F32ToF16(s);
      if (F16ToF32(h) != s) {  // bf16 → f16 is exact within f16's range only
        return InvalidArgument(sc->file + ": tensor '" + sc->name + "' has scale " +
                               std::to_string(s) + " at [" + std::to_string(j) + ", " +
                               std::to_string(g) + "], not exactly representable as the f16 "
                               "group scale loom's int4 kernels use");
      }
      scale16[static_cast<size_t>(j * file_groups + g)] = h;
    }
  }
  // compressed-tensors pack_to_int32: element 8k + e at bits 4e of word k, stored as q + 8.
  std::vector<int8_t> q(static_cast<size_t>(out * in));
  for (int64_t j = 0; j < out; ++j) {
    for (int64_t k = 0; k < words; ++k) {
      uint32_t word;
      std::memcpy(&word, packed->data + 4 * (j * words + k), 4);
      for (int e = 0; e < 8; ++e) {
        q[static_cast<size_t>(j * in + 8 * k + e)] = static_cast<int8_t>((word >> (4 * e)) & 15u) - 8;
      }
    }
  }
  ASSIGN_OR_RETURN(std::unique_ptr<Int4Weight> w,
                   Int4WeightFromRows(q.data(), scale16.data(), out, in, group,
                                      packed->file + ": tensor '" + packed->name + "'"));
  lin->int4 = std::move(w);
  ReleaseMappedPages(packed->data, packed->nbytes);  // never read again
  return OkStatus();
}

}  // namespace

Status LoadCtLinear(const SafetensorsStore& store, const CtScheme& scheme, int64_t out, int64_t in,
                    Linear* lin, std::set<std::string>* consumed, uint64_t* bytes) {
  const std::string& name = lin->name;
  const bool int4 = scheme.kind == CtScheme::Kind::kInt4Group;
  const std::string what = "compressed-tensors config group '" + scheme.group_name + "' (" +
                           (int4 ? "pack-quantized int4, group " + std::to_string(scheme.group_size)
                                 : std::string("int-quantized int8 per channel")) + ")";
  RETURN_IF_ERROR(RejectExtras(store, name, what));
  if (int4) {
    if (const TensorInfo* dense = store.Find(name + ".weight")) {
      return InvalidArgument(dense->file + ": tensor '" + dense->name + "' is a dense weight, but " +
                             what + " stores " + name + ".weight_packed");
    }
    RETURN_IF_ERROR(LoadInt4(store, name, what, scheme.group_size, out, in, lin, consumed));
    if (bytes) *bytes += lin->int4->bytes();
  } else {
    RETURN_IF_ERROR(LoadInt8(store, name, what, out, in, lin, consumed));
    if (bytes) *bytes += lin->int8->bytes();
  }
  lin->weight = Tensor{DType::kF32, {out, in}, nullptr};  // shape only: no dense weight
  return OkStatus();
}

}  // namespace loom
