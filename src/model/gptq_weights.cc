// GPTQ / AWQ projection tensors → codes (unpacked exactly as gptqmodel and AutoAWQ do) → loom's asymmetric Int4Weight, every dtype, shape and value checked before use.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "base/mmap_file.h"
#include "cpu/int4_cpu.h"
#include "cpu/int8_cpu.h"
#include "model/gptq.h"
#include "model/tensor_need.h"
#include "tensor/dtype.h"

namespace loom {

namespace {

// AutoAWQ's GEMM packing: output 8c + e sits in nibble kAwqNibble[e] of word c
// (AWQ_ORDER = [0, 2, 4, 6, 1, 3, 5, 7] packs; AWQ_REVERSE_ORDER is its inverse, this table).
constexpr int kAwqNibble[8] = {0, 4, 1, 5, 2, 6, 3, 7};


uint32_t Word(const TensorInfo& t, int64_t index) {
  uint32_t w;
  std::memcpy(&w, t.data + 4 * index, 4);
  return w;
}

}  // namespace

StatusOr<GptqCodes> UnpackGptqLinear(const SafetensorsStore& store, const GptqConfig& quant,
                                     const std::string& name, int64_t out, int64_t in,
                                     std::set<std::string>* consumed) {
  const bool awq = quant.method == GptqConfig::Method::kAwq;
  const std::string scheme = quant.Name() + " (" + quant.where + ")";
  if (in % 32 != 0 || out % 8 != 0) {
    return InvalidArgument(name + ": shape " + ShapeString({out, in}) +
                           " (config.json) cannot be read as " + scheme +
                           " (inputs must be a multiple of 32, outputs of 8)");
  }
  GptqCodes c;
  c.group = quant.group_size < 0 ? in : quant.group_size;
  // GPTQ: ceil(in / group) groups, the last one possibly short (a group_size of 128 over 64
  // inputs is one group); AWQ needs whole groups.
  if (awq && in % c.group != 0) {
    return InvalidArgument(name + ": " + std::to_string(in) +
                           " input features (config.json) are not a multiple of "
                           "group_size " + std::to_string(c.group) + " (" + scheme + ")");
  }
  c.groups = (in + c.group - 1) / c.group;
  if (const TensorInfo* dense = store.Find(name + ".weight")) {
    return InvalidArgument(dense->file + ": tensor '" + dense->name + "' is a dense weight, but " +
                           name + ".qweight says the projection is quantized");
  }
  ASSIGN_OR_RETURN(const TensorInfo* qw, NeedTensor(store, name + ".qweight", {"I32"},
                                              awq ? std::vector<int64_t>{in, out / 8} : std::vector<int64_t>{in / 8, out},
                                              scheme, consumed));
  ASSIGN_OR_RETURN(const TensorInfo* qz, NeedTensor(store, name + ".qzeros", {"I32"}, {c.groups, out / 8}, scheme, consumed));
  ASSIGN_OR_RETURN(const TensorInfo* sc, NeedTensor(store, name + ".scales", {"F16", "BF16", "F32"}, {c.groups, out}, scheme, consumed));
  c.scale.resize(static_cast<size_t>(c.groups * out));
  {
    std::vector<float> s(static_cast<size_t>(c.groups * out));  // [groups, out]
    ConvertToF32(*sc->dtype, sc->data, s.data(), c.groups * out);
    for (int64_t g = 0; g < c.groups; ++g) {
      for (int64_t j = 0; j < out; ++j) {
        const float v = s[static_cast<size_t>(g * out + j)];
        if (!std::isfinite(v) || F16ToF32(F32ToF16(v)) != v) {
          return InvalidArgument(sc->file + ": tensor '" + sc->name + "' has scale " + std::to_string(v) +
                                 " at [" + std::to_string(g) + ", " + std::to_string(j) + "], not a finite "
                                 "value exactly representable as the f16 group scale loom's int4 kernels use");
        }
        c.scale[static_cast<size_t>(j * c.groups + g)] = v;
      }
    }
  }
  c.u.resize(static_cast<size_t>(out * in));
  c.zero.resize(static_cast<size_t>(out * c.groups));
  if (awq) {
    if (const TensorInfo* gi = store.Find(name + ".g_idx")) {
      return InvalidArgument(gi->file + ": tensor '" + gi->name + "' is not part of " + scheme + " (AWQ has no g_idx)");
    }
    for (int64_t i = 0; i < in; ++i) {
      for (int64_t w = 0; w < out / 8; ++w) {
        const uint32_t word = Word(*qw, i * (out / 8) + w);
        for (int e = 0; e < 8; ++e) c.u[static_cast<size_t>((8 * w + e) * in + i)] = (word >> (4 * kAwqNibble[e])) & 15u;
      }
    }
    for (int64_t g = 0; g < c.groups; ++g) {
      for (int64_t w = 0; w < out / 8; ++w) {
        const uint32_t word = Word(*qz, g * (out / 8) + w);
        for (int e = 0; e < 8; ++e) c.zero[static_cast<size_t>((8 * w + e) * c.groups + g)] = (word >> (4 * kAwqNibble[e])) & 15u;
      }
    }
    c.group_of.resize(static_cast<size_t>(in));
    for (int64_t i = 0; i < in; ++i) c.group_of[static_cast<size_t>(i)] = static_cast<int32_t>(i / c.group);
    return c;
  }
  // GPTQ: input 8r + e at nibble e of qweight[r, j]; zero of output 8w + e at nibble e of
  // qzeros[g, w]. v1 stores zero − 1: gptqmodel's v1 → v2 conversion adds 0x11111111 to each
  // word (a stored nibble 15 carries into the next), which this reproduces exactly.
  for (int64_t r = 0; r < in / 8; ++r) {
    for (int64_t j = 0; j < out; ++j) {
      const uint32_t word = Word(*qw, r * out + j);
      for (int e = 0; e < 8; ++e) c.u[static_cast<size_t>(j * in + 8 * r + e)] = (word >> (4 * e)) & 15u;
    }
  }
  for (int64_t g = 0; g < c.groups; ++g) {
    for (int64_t w = 0; w < out / 8; ++w) {
      uint32_t word = Word(*qz, g * (out / 8) + w);
      if (!quant.v2) word += 0x11111111u;
      for (int e = 0; e < 8; ++e) {
        const uint8_t z = (word >> (4 * e)) & 15u;
        if (quant.sym && z != 8) {
          return InvalidArgument(qz->file + ": tensor '" + qz->name + "' has zero point " + std::to_string(z) +
                                 " at [" + std::to_string(g) + ", " + std::to_string(8 * w + e) + "]; sym is true, "
                                 "so every zero point must be 8 (" + (quant.v2 ? "gptq_v2: stored 8" : "v1: stored 7") + ")");
        }
        c.zero[static_cast<size_t>((8 * w + e) * c.groups + g)] = z;
      }
    }
  }
  c.group_of.resize(static_cast<size_t>(in));
  const TensorInfo* gi = store.Find(name + ".g_idx");
  if (!gi && quant.desc_act) {
    return InvalidArgument("checkpoint " + store.source() + ": missing tensor '" + name +
                           ".g_idx' ([" + std::to_string(in) + "]) required by desc_act true (" +
                           scheme + ")");
  }
  if (gi) {
    ASSIGN_OR_RETURN(gi, NeedTensor(store, name + ".g_idx", {"I32", "I64"}, {in}, scheme, consumed));
    std::vector<int64_t> count(static_cast<size_t>(c.groups), 0);
    for (int64_t i = 0; i < in; ++i) {
      int64_t v;
      if (gi->dtype_name == "I64") {
        std::memcpy(&v, gi->data + 8 * i, 8);
      } else {
        int32_t v32;
        std::memcpy(&v32, gi->data + 4 * i, 4);
        v = v32;
      }
      if (v < 0 || v >= c.groups) {
        return InvalidArgument(gi->file + ": tensor '" + gi->name + "' has " + std::to_string(v) + " at [" +
                               std::to_string(i) + "], outside the " + std::to_string(c.groups) + " groups of " + scheme);
      }
      c.group_of[static_cast<size_t>(i)] = static_cast<int32_t>(v);
      ++count[static_cast<size_t>(v)];
    }
    for (int64_t g = 0; g < c.groups; ++g) {
      if (count[static_cast<size_t>(g)] != std::min(c.group, in - g * c.group)) {
        return InvalidArgument(gi->file + ": tensor '" + gi->name + "' puts " + std::to_string(count[static_cast<size_t>(g)]) +
                               " inputs in group " + std::to_string(g) + "; loom needs exactly group_size " +
                               std::to_string(c.group) + " in each, the rest in the last (as GPTQ writes them)");
      }
    }
  } else {
    for (int64_t i = 0; i < in; ++i) c.group_of[static_cast<size_t>(i)] = static_cast<int32_t>(i / c.group);
  }
  return c;
}

Status LoadGptqLinear(const SafetensorsStore& store, const GptqConfig& quant, int64_t out,
                      int64_t in, Linear* lin, std::set<std::string>* consumed, uint64_t* bytes) {
  const std::string& name = lin->name;
  RETURN_IF_ERROR(CheckKernelDepth(name, in, "int4"));
  ASSIGN_OR_RETURN(GptqCodes c, UnpackGptqLinear(store, quant, name, out, in, consumed));
  // Inputs in kernel order: sorted by group (stable), so each group is contiguous.
  std::vector<int32_t> perm(static_cast<size_t>(in));
  std::iota(perm.begin(), perm.end(), 0);
  std::stable_sort(perm.begin(), perm.end(), [&](int32_t a, int32_t b) {
    return c.group_of[static_cast<size_t>(a)] < c.group_of[static_cast<size_t>(b)];
  });
  bool identity = true;
  for (size_t k = 0; k < perm.size(); ++k) identity = identity && perm[k] == static_cast<int32_t>(k);
  // Kernel groups: the largest of 128/64/32 dividing the file's group; each file group's scale
  // and zero repeat over its kernel groups (exact: the same d·(u − z) per weight).
  auto fits = [&](int64_t g) { return c.group % g == 0 && in % g == 0; };
  const int kg = fits(128) ? 128 : fits(64) ? 64 : 32;  // in and group are multiples of 32
  const int64_t rep = c.group / kg, kgroups = in / kg;
  std::vector<uint8_t> u(static_cast<size_t>(out * in)), zero(static_cast<size_t>(out * kgroups));
  std::vector<uint16_t> scale(static_cast<size_t>(out * kgroups));
  for (int64_t j = 0; j < out; ++j) {
    for (int64_t k = 0; k < in; ++k) u[static_cast<size_t>(j * in + k)] = c.u[static_cast<size_t>(j * in + perm[static_cast<size_t>(k)])];
    for (int64_t g = 0; g < kgroups; ++g) {
      zero[static_cast<size_t>(j * kgroups + g)] = c.zero[static_cast<size_t>(j * c.groups + g / rep)];
      scale[static_cast<size_t>(j * kgroups + g)] = F32ToF16(c.scale[static_cast<size_t>(j * c.groups + g / rep)]);
    }
  }
  if (identity) perm.clear();
  const TensorInfo* qw = store.Find(name + ".qweight");
  ASSIGN_OR_RETURN(std::unique_ptr<Int4Weight> w,
                   Int4WeightAsymmetric(u.data(), scale.data(), zero.data(), std::move(perm), out, in, kg,
                                        qw->file + ": tensor '" + qw->name + "'"));
  if (bytes) *bytes += w->bytes();
  lin->int4 = std::move(w);
  lin->weight = Tensor{DType::kF32, {out, in}, nullptr};  // shape only: no dense weight
  ReleaseMappedPages(qw->data, qw->nbytes);  // never read again
  return OkStatus();
}

}  // namespace loom
