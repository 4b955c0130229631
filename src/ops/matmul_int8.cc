// Int8 matmul op: weight quantization at load; activation quantization + column blocks over the pool.
#include "ops/matmul_int8.h"

#include <algorithm>
#include <cmath>

#include "base/check.h"
#include "base/thread_pool.h"
#include "cpu/int8_cpu.h"

namespace loom {

StatusOr<std::unique_ptr<Int8Weight>> QuantizeWeightInt8(const Tensor& w, const std::string& name) {
  if (w.rank() != 2) return InvalidArgument("quantizing " + name + ": not a matrix");
  if (w.dtype != DType::kF32 && w.dtype != DType::kF16 && w.dtype != DType::kBF16) {
    return InvalidArgument("quantizing " + name + ": int8 needs an F32/F16/BF16 weight");
  }
  auto out = std::make_unique<Int8Weight>();
  out->rows = w.dim(0);
  out->cols = w.dim(1);
  if (out->cols > cpu::kMaxInt8Depth) {
    return InvalidArgument("quantizing " + name + ": " + std::to_string(out->cols) +
                           " input features exceed the int8 kernels' " +
                           std::to_string(cpu::kMaxInt8Depth));
  }
  RETURN_IF_ERROR(out->q.Resize(static_cast<size_t>(out->rows * out->cols)));
  out->scale.resize(static_cast<size_t>(out->rows));
  out->sum.resize(static_cast<size_t>(out->rows));
  const size_t row_bytes = static_cast<size_t>(out->cols) * DTypeSize(w.dtype);
  const int64_t cols = out->cols;
  ThreadPool::Global().ParallelFor(out->rows, [&](int64_t j, int) {
    thread_local std::vector<float> row;
    row.resize(static_cast<size_t>(cols));
    ConvertToF32(w.dtype, static_cast<const uint8_t*>(w.data) + static_cast<size_t>(j) * row_bytes,
                 row.data(), cols);
    float scale = 0;
    cpu::QuantizeRowsInt8(row.data(), 1, cols, out->q.data() + j * cols, &scale);
    out->scale[static_cast<size_t>(j)] = scale;
    int32_t sum = 0;
    for (int64_t i = 0; i < cols; ++i) sum += out->q[static_cast<size_t>(j * cols + i)];
    out->sum[static_cast<size_t>(j)] = sum;
  });
  return out;
}

namespace {
// Quantized activation rows and their scales, owned by the calling thread (as Matmul's).
struct Int8Scratch {
  AlignedBuffer<int8_t> xq;  // [n, cols]
  std::vector<float> sx;     // [n]
};
Int8Scratch& Scratch() {
  static thread_local Int8Scratch s;
  return s;
}
}  // namespace

void MatmulInt8(const float* x, int64_t n, const Int8Weight& w, float* y,
                const MatmulEpilogue* epilogue) {
  const int64_t m = w.rows, k = w.cols;
  if (n == 0 || m == 0) return;
  Int8Scratch& s = Scratch();
  LOOM_CHECK_OK(s.xq.Resize(static_cast<size_t>(n * k)));
  s.sx.resize(static_cast<size_t>(n));
  cpu::QuantizeRowsInt8(x, n, k, s.xq.data(), s.sx.data());
  ThreadPool& pool = ThreadPool::Global();
  const int64_t target_tasks = static_cast<int64_t>(pool.num_threads()) * 8;
  int64_t block = std::max<int64_t>(16, (m + target_tasks - 1) / target_tasks);
  block = (block + 15) / 16 * 16;
  const int64_t num_tasks = (m + block - 1) / block;
  const cpu::Isa isa = cpu::ActiveIsa();
  pool.ParallelFor(num_tasks, [&](int64_t task, int) {
    const int64_t j0 = task * block;
    const int64_t j1 = std::min(m, j0 + block);
    cpu::MatmulInt8(isa, s.xq.data(), s.sx.data(), n, k, w.q.data(), w.scale.data(),
                    w.sum.data(), j0, j1, y + j0, m);
    if (epilogue) (*epilogue)(j0, j1);
  });
}

}  // namespace loom
