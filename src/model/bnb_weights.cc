// bitsandbytes 4-bit (NF4/FP4) projection tensors → loom's Nf4Weight: the packed quant_state JSON, every
// tensor's dtype and shape, and double-quant absmax computed as bitsandbytes does.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>

#include "base/json.h"
#include "base/mmap_file.h"
#include "cpu/nf4_cpu.h"
#include "model/bnb.h"
#include "model/tensor_need.h"
#include "ops/bnb_double_quant.h"
#include "ops/basic_ops.h"

namespace loom {

namespace {

using nlohmann::json;

std::string Show(const json& v) { return JsonToString(v, -1, 80); }

constexpr size_t kMaxQuantStateBytes = 4096;


std::vector<float> F32s(const TensorInfo& t) {
  std::vector<float> v(t.nbytes / 4);
  std::memcpy(v.data(), t.data, v.size() * 4);
  return v;
}

// A block absmax (or a double quant's nested_absmax) as bitsandbytes writes it: finite and ≥ 0
// (the largest |w| of its block). A negative one would flip its block's signs.
Status CheckBlockScales(const TensorInfo& t, const std::vector<float>& v) {
  for (size_t i = 0; i < v.size(); ++i) {
    if (!std::isfinite(v[i]) || v[i] < 0) {
      return InvalidArgument(t.file + ": tensor '" + t.name + "' entry " + std::to_string(i) +
                             " is " + std::to_string(v[i]) +
                             ", not a block absmax (finite, at least 0)");
    }
  }
  return OkStatus();
}

// The fields of weight.quant_state.bitsandbytes__<type> (bitsandbytes QuantState.as_dict(packed)).
struct QuantState {
  int64_t blocksize = 0;
  DType dtype = DType::kF32;  // "dtype": dequantize_4bit's default output
  bool nested = false;
  float nested_offset = 0;
};

StatusOr<QuantState> ParseQuantState(const TensorInfo& t, const BnbConfig& config, int64_t out,
                                     int64_t in) {
  const bool want_nested = config.double_quant;
  const std::string what = t.file + ": tensor '" + t.name + "'";
  if (t.dtype_name != "U8" || t.shape.size() != 1 || t.nbytes == 0 ||
      t.nbytes > kMaxQuantStateBytes) {
    return InvalidArgument(what + " has dtype " + t.dtype_name + " and shape " +
                           ShapeString(t.shape) + "; a packed quant_state is U8 JSON of 1.." +
                           std::to_string(kMaxQuantStateBytes) + " bytes");
  }
  const std::string text(reinterpret_cast<const char*>(t.data), t.nbytes);
  ASSIGN_OR_RETURN(json j, ParseJson(text, what));
  if (!j.is_object()) return InvalidArgument(what + ": quant_state is not a JSON object");
  for (auto it = j.begin(); it != j.end(); ++it) {
    static const char* const kKnown[] = {"quant_type",   "blocksize",        "dtype",
                                         "shape",        "nested_blocksize", "nested_dtype",
                                         "nested_offset"};
    if (std::none_of(std::begin(kKnown), std::end(kKnown),
                     [&](const char* k) { return it.key() == k; })) {
      return InvalidArgument(what + ": quant_state field '" + KeyForMessage(it.key()) +
                             "' is not one bitsandbytes writes");
    }
  }
  QuantState qs;
  std::string type;
  RETURN_IF_ERROR(GetString(j, "quant_type", what, &type));
  if (type != cpu::Bnb4TypeName(config.type)) {
    return InvalidArgument(what + ": quant_state quant_type is '" + type +
                           "', but quantization_config's bnb_4bit_quant_type is '" +
                           cpu::Bnb4TypeName(config.type) + "'");
  }
  RETURN_IF_ERROR(GetInt(j, "blocksize", what, &qs.blocksize, 2, 4096));
  if (qs.blocksize % 2 != 0 || in % qs.blocksize != 0) {
    return InvalidArgument(what + ": quant_state blocksize " + std::to_string(qs.blocksize) +
                           " does not divide the projection's " + std::to_string(in) +
                           " input features into whole blocks (loom needs blocks within rows)");
  }
  std::string dtype;
  RETURN_IF_ERROR(GetString(j, "dtype", what, &dtype));
  if (dtype != "float32" && dtype != "bfloat16" && dtype != "float16") {
    return InvalidArgument(what + ": quant_state dtype '" + dtype +
                           "' is not float32, bfloat16 or float16");
  }
  qs.dtype = dtype == "bfloat16" ? DType::kBF16 : dtype == "float16" ? DType::kF16 : DType::kF32;
  std::vector<int32_t> shape;
  RETURN_IF_ERROR(GetIntList(j, "shape", what, &shape, 0, std::numeric_limits<int32_t>::max(), 2));
  if (shape.size() != 2 || shape[0] != out || shape[1] != in) {
    return InvalidArgument(what + ": quant_state shape is " + Show(j["shape"]) +
                           ", the model needs " + ShapeString({out, in}));
  }
  qs.nested =
      j.contains("nested_blocksize") || j.contains("nested_dtype") || j.contains("nested_offset");
  if (qs.nested != want_nested) {
    return InvalidArgument(what + ": quant_state " + (qs.nested ? "has" : "lacks") +
                           " nested (double-quant) fields, but quantization_config's "
                           "bnb_4bit_use_double_quant is " +
                           (want_nested ? "true" : "false"));
  }
  if (qs.nested) {
    int64_t nb = 0;
    RETURN_IF_ERROR(GetInt(j, "nested_blocksize", what, &nb));
    if (nb != kBnbNestedBlock) {
      return InvalidArgument(what + ": quant_state nested_blocksize is " + std::to_string(nb) +
                             "; bitsandbytes (and loom) use 256");
    }
    std::string nd;
    RETURN_IF_ERROR(GetString(j, "nested_dtype", what, &nd));
    if (nd != "float32") {
      return InvalidArgument(what + ": quant_state nested_dtype is '" + nd +
                             "'; loom reads float32");
    }
    double offset = 0;
    RETURN_IF_ERROR(GetFloat(j, "nested_offset", what, &offset, -3.4e38, 3.4e38));
    qs.nested_offset = static_cast<float>(offset);  // bitsandbytes: torch.tensor(float(...)), f32
  }
  return qs;
}

}  // namespace

bool HasBnbQuantState(const SafetensorsStore& store, const std::string& name) {
  return store.Find(name + ".weight.quant_state.bitsandbytes__nf4") ||
         store.Find(name + ".weight.quant_state.bitsandbytes__fp4") ||
         store.Find(name + ".weight.absmax") || store.Find(name + ".SCB");
}

Status LoadBnbLinear(const SafetensorsStore& store, const BnbConfig& config, int64_t out,
                     int64_t in, Linear* lin, std::set<std::string>* consumed, uint64_t* bytes) {
  if (config.bits == 8) return LoadBnb8Linear(store, config, out, in, lin, consumed, bytes);
  const std::string w = lin->name + ".weight";
  const std::string type = cpu::Bnb4TypeName(config.type);
  const std::string other = config.type == cpu::Bnb4Type::kNf4 ? "fp4" : "nf4";
  if (const TensorInfo* t = store.Find(w + ".quant_state.bitsandbytes__" + other)) {
    return InvalidArgument(t->file + ": tensor '" + t->name + "' holds bitsandbytes " + other +
                           " weights, but quantization_config's bnb_4bit_quant_type is '" + type +
                           "'");
  }
  const TensorInfo* qst = store.Find(w + ".quant_state.bitsandbytes__" + type);
  if (!qst) {
    return InvalidArgument("checkpoint " + store.source() + ": missing tensor '" + w +
                           ".quant_state.bitsandbytes__" + type +
                           "' (the packed quant_state of a bitsandbytes 4-bit weight)");
  }
  if (config.Skipped(lin->name)) {
    return InvalidArgument(qst->file + ": tensor '" + qst->name + "' quantizes " + lin->name +
                           ", which quantization_config's llm_int8_skip_modules keeps dense");
  }
  consumed->insert(qst->name);
  ASSIGN_OR_RETURN(QuantState qs, ParseQuantState(*qst, config, out, in));
const std::string why = "bitsandbytes " + type + " (blocksize " + std::to_string(qs.blocksize) +
                          (qs.nested ? ", double quant" : "") + ") of " + lin->name + " " +
                          ShapeString({out, in});
  const int64_t numel = out * in, blocks = numel / qs.blocksize;
  ASSIGN_OR_RETURN(const TensorInfo* packed, NeedTensor(store, w, {"U8"}, {numel / 2, 1}, why, consumed));
  ASSIGN_OR_RETURN(const TensorInfo* qmap,
                   NeedTensor(store, w + ".quant_map", {"F32"}, {16}, why, consumed));
  // The quant_map is get_4bit_type(type): the values the indices mean (FP4's holds +0.0 where
  // the dequantization gives −0.0, so values are compared, not bits).
  const std::vector<float> code = F32s(*qmap);
  const float* want = cpu::Bnb4Code(config.type);
  for (int i = 0; i < 16; ++i) {
    if (!(code[static_cast<size_t>(i)] == want[i])) {
      return InvalidArgument(qmap->file + ": tensor '" + qmap->name + "' entry " +
                             std::to_string(i) + " is " +
                             std::to_string(code[static_cast<size_t>(i)]) + ", not bitsandbytes' " +
                             type + " code value " + std::to_string(want[i]));
    }
  }
  std::vector<float> absmax(static_cast<size_t>(blocks));
  if (!qs.nested) {
    ASSIGN_OR_RETURN(const TensorInfo* am,
                     NeedTensor(store, w + ".absmax", {"F32"}, {blocks}, why, consumed));
    absmax = F32s(*am);
    RETURN_IF_ERROR(CheckBlockScales(*am, absmax));
  } else {
    const int64_t nested_blocks = (blocks + kBnbNestedBlock - 1) / kBnbNestedBlock;
    ASSIGN_OR_RETURN(const TensorInfo* qa,
                     NeedTensor(store, w + ".absmax", {"U8"}, {blocks}, why, consumed));
    ASSIGN_OR_RETURN(const TensorInfo* na,
                     NeedTensor(store, w + ".nested_absmax", {"F32"}, {nested_blocks}, why, consumed));
    ASSIGN_OR_RETURN(const TensorInfo* nm,
                     NeedTensor(store, w + ".nested_quant_map", {"F32"}, {256}, why, consumed));
    const std::vector<float> nested_absmax = F32s(*na), nested_code = F32s(*nm);
    RETURN_IF_ERROR(CheckBlockScales(*na, nested_absmax));
    for (const float v : nested_code) {
      if (!std::isfinite(v)) {
        return InvalidArgument(nm->file + ": tensor '" + nm->name +
                               "' has a value that is not finite");
      }
    }
    for (int64_t b = 0; b < blocks; ++b) {
      const float scale =
          BnbNestedScale(nested_code[qa->data[b]],
                         nested_absmax[static_cast<size_t>(b / kBnbNestedBlock)], qs.nested_offset);
      if (!std::isfinite(scale)) {
        return InvalidArgument(qa->file + ": block " + std::to_string(b) + " of '" + qa->name +
                               "' dequantizes to a scale that is not finite (nested_absmax " +
                               std::to_string(nested_absmax[static_cast<size_t>(b / kBnbNestedBlock)]) +
                               ", nested_offset " + std::to_string(qs.nested_offset) + ")");
      }
      absmax[static_cast<size_t>(b)] = scale;
    }
  }
  // bitsandbytes packs element 2m in the high nibble of byte m, element 2m + 1 in the low.
  std::vector<uint8_t> q(static_cast<size_t>(numel));
  for (int64_t m = 0; m < numel / 2; ++m) {
    q[static_cast<size_t>(2 * m)] = packed->data[m] >> 4;
    q[static_cast<size_t>(2 * m + 1)] = packed->data[m] & 0x0F;
  }
  ASSIGN_OR_RETURN(std::unique_ptr<Nf4Weight> nf4,
                   Nf4WeightFromRows(q.data(), absmax.data(), out, in, qs.blocksize,
                                     packed->file + ": " + w + " (" + why + ")", config.type));
  nf4->dequant_dtype = qs.dtype;
  if (bytes) *bytes += nf4->bytes();
  lin->nf4 = std::move(nf4);
  ReleaseMappedPages(packed->data, packed->nbytes);       // never read again
  lin->weight = Tensor{DType::kF32, {out, in}, nullptr};  // shape only: no dense weight
  return OkStatus();
}

}  // namespace loom
