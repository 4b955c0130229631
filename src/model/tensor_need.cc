// NeedTensor: presence, dtype and shape of a tensor a pre-quantized reader needs; CheckKernelDepth.
#include "model/tensor_need.h"

#include "cpu/int8_cpu.h"
#include "tensor/tensor.h"

namespace loom {

StatusOr<const TensorInfo*> NeedTensor(const SafetensorsStore& store, const std::string& name,
                                       std::initializer_list<const char*> dtypes,
                                       const std::vector<int64_t>& shape, const std::string& scheme,
                                       std::set<std::string>* consumed) {
  const TensorInfo* t = store.Find(name);
  if (!t) {
    return InvalidArgument("checkpoint " + store.source() + ": missing tensor '" + name + "' (" +
                           ShapeString(shape) + ") required by " + scheme);
  }
  bool dtype_ok = false;
  std::string want;
  for (const char* d : dtypes) {
    dtype_ok = dtype_ok || t->dtype_name == d;
    if (!want.empty()) want += '/';  // (a "" + std::string here drew GCC 12's false -Wrestrict)
    want += d;
  }
  if (!dtype_ok || t->shape != shape) {
    return InvalidArgument(t->file + ": tensor '" + name + "' has dtype " + t->dtype_name +
                           " and shape " + ShapeString(t->shape) + "; " + scheme + " needs " + want +
                           " " + ShapeString(shape));
  }
  consumed->insert(name);
  return t;
}

Status CheckKernelDepth(const std::string& name, int64_t in, const char* kernels) {
  if (in <= cpu::kMaxInt8Depth) return OkStatus();
  return InvalidArgument(name + ": " + std::to_string(in) + " input features (config.json) exceed " +
                         "the " + kernels + " kernels' limit of " +
                         std::to_string(cpu::kMaxInt8Depth));
}

}  // namespace loom
