// The checks every pre-quantized reader makes: a tensor it needs present, with an allowed dtype and the exact shape; a projection's width within the int kernels'.
#pragma once

#include <initializer_list>
#include <set>
#include <string>
#include <vector>

#include "base/status.h"
#include "io/safetensors.h"

namespace loom {

// The tensor `name` of `store` with dtype among `dtypes` and shape `shape`, added to `consumed`;
// otherwise an error naming the tensor, its file, what it has and what `scheme` needs.
StatusOr<const TensorInfo*> NeedTensor(const SafetensorsStore& store, const std::string& name,
                                       std::initializer_list<const char*> dtypes,
                                       const std::vector<int64_t>& shape, const std::string& scheme,
                                       std::set<std::string>* consumed);

// A projection's input width (from config.json) that the int8/int4 kernels cannot take: an error
// naming `name` and `kernels` ("int8", "int4"), else OK.
Status CheckKernelDepth(const std::string& name, int64_t in, const char* kernels);

}  // namespace loom
