// Int8 matmul op: weight quantization at load; activation quantization + column blocks over the pool.
#include "ops/matmul_int8.h"

#include <algorithm>
#include <atomic>
#include <cmath>

#include "base/check.h"
#include "base/thread_pool.h"
#include "cpu/int8_cpu.h"
#include "ops/panel_blocks.h"
#include "tensor/dtype.h"
#include "tensor/finite.h"

namespace loom {

float Int8Weight::Dequantized(int64_t j, int64_t i) const {
  const float q = At(j, i), sc = scale[static_cast<size_t>(j)];
  return llm_int8 ? q * sc * kLlmInt8Weight : q * sc;
}

int8_t Int8Weight::At(int64_t j, int64_t i) const {
  const int64_t p = j / cpu::kInt8Panel, c = j % cpu::kInt8Panel;
  return q[static_cast<size_t>(p * cpu::kInt8Panel * k_pad + (i / 4) * 64 + 4 * c + i % 4)];
}

namespace {

// Shapes and buffers of an Int8Weight for a [rows, cols] matrix; `what` opens an error
// ("quantizing <name>" at load, the tensor's name for a pre-quantized file).
StatusOr<std::unique_ptr<Int8Weight>> NewInt8Weight(int64_t rows, int64_t cols, const std::string& what) {
  if (cols > cpu::kMaxInt8Depth) {
    return InvalidArgument(what + ": " + std::to_string(cols) +
                           " input features exceed the int8 kernels' " +
                           std::to_string(cpu::kMaxInt8Depth));
  }
  auto out = std::make_unique<Int8Weight>();
  out->rows = rows;
  out->cols = cols;
  out->k_pad = (cols + cpu::kInt8Align - 1) / cpu::kInt8Align * cpu::kInt8Align;
  out->panels = (rows + cpu::kInt8Panel - 1) / cpu::kInt8Panel;
  RETURN_IF_ERROR(out->q.Resize(static_cast<size_t>(out->panels * cpu::kInt8Panel * out->k_pad)));
  out->scale.assign(static_cast<size_t>(out->panels * cpu::kInt8Panel), 0.0f);
  out->sum.assign(static_cast<size_t>(out->panels * cpu::kInt8Panel), 0);
  return out;
}

// Packs panel p from `row(j, dst)`, which writes row j's cols values (int8) into dst.
template <typename RowFn>
void PackPanel(Int8Weight* w, int64_t p, RowFn row) {
  thread_local std::vector<int8_t> q;  // [16, k_pad]
  q.assign(static_cast<size_t>(cpu::kInt8Panel * w->k_pad), 0);
  for (int64_t c = 0; c < cpu::kInt8Panel && p * cpu::kInt8Panel + c < w->rows; ++c) {
    const int64_t j = p * cpu::kInt8Panel + c;
    int8_t* dst = q.data() + c * w->k_pad;
    row(j, dst);
    int32_t sum = 0;
    for (int64_t i = 0; i < w->cols; ++i) sum += dst[i];
    w->sum[static_cast<size_t>(j)] = sum;
  }
  cpu::PackInt8Panel(q.data(), w->k_pad, w->q.data() + p * cpu::kInt8Panel * w->k_pad);
}

}  // namespace

StatusOr<std::unique_ptr<Int8Weight>> QuantizeWeightInt8(const Tensor& w, const std::string& name) {
  if (w.rank() != 2) return InvalidArgument("quantizing " + name + ": not a matrix");
  if (w.dtype != DType::kF32 && w.dtype != DType::kF16 && w.dtype != DType::kBF16) {
    return InvalidArgument("quantizing " + name + ": int8 needs an F32/F16/BF16 weight");
  }
  ASSIGN_OR_RETURN(std::unique_ptr<Int8Weight> out, NewInt8Weight(w.dim(0), w.dim(1), "quantizing " + name));
  const int64_t cols = out->cols;
  const size_t row_bytes = static_cast<size_t>(cols) * DTypeSize(w.dtype);
  Int8Weight* o = out.get();
  // A NaN/Inf weight (loaded with --no-check-weights) would quantize to ordinary-looking int8
  // (the row max skips a NaN): refused, as int4 refuses it. The first bad row is named.
  std::atomic<int64_t> bad_row{w.dim(0)};
  ThreadPool::Global().ParallelFor(out->panels, [&](int64_t p, int) {
    PackPanel(o, p, [&](int64_t j, int8_t* dst) {
      thread_local std::vector<float> row;
      row.resize(static_cast<size_t>(cols));
      ConvertToF32(w.dtype, static_cast<const uint8_t*>(w.data) + static_cast<size_t>(j) * row_bytes,
                   row.data(), cols);
      if (FindNonFinite(DType::kF32, row.data(), cols) >= 0) {
        for (int64_t seen = bad_row.load(); j < seen && !bad_row.compare_exchange_weak(seen, j);) {
        }
      }
      cpu::QuantizeRowsInt8(row.data(), 1, cols, dst, &o->scale[static_cast<size_t>(j)]);
    });
  });
  if (bad_row.load() < w.dim(0)) {
    return InvalidArgument("quantizing " + name + " to int8: row " + std::to_string(bad_row.load()) +
                           " has a weight that is not finite");
  }
  return out;
}

StatusOr<std::unique_ptr<Int8Weight>> Int8WeightFromRows(const int8_t* q, const float* scale,
                                                         int64_t rows, int64_t cols,
                                                         const std::string& name) {
  ASSIGN_OR_RETURN(std::unique_ptr<Int8Weight> out, NewInt8Weight(rows, cols, name));
  for (int64_t j = 0; j < rows; ++j) {
    if (!std::isfinite(scale[j])) {
      return InvalidArgument(name + ": the scale of row " + std::to_string(j) + " is not finite");
    }
    out->scale[static_cast<size_t>(j)] = scale[j];
  }
  Int8Weight* o = out.get();
  for (int64_t p = 0; p < out->panels; ++p) {
    PackPanel(o, p, [&](int64_t j, int8_t* dst) {
      std::copy(q + j * cols, q + (j + 1) * cols, dst);
    });
  }
  return out;
}

namespace {
// Quantized activation rows (biased to u8, padded) and their scales, owned by the calling thread.
struct Int8Scratch {
  AlignedBuffer<uint8_t> xu;  // [n, k_pad]: xq + 128, padding 128
  std::vector<float> sx;      // [n]
  // LLM.int8: per row, the (input index, f32 value) of each element left out as an outlier.
  std::vector<std::vector<std::pair<int64_t, float>>> outliers;
};

// LLM.int8's quantized activation row, as bitsandbytes' int8_vectorwise_quant computes it: x rounded
// to f16 (A.to(float16)); elements whose f16 magnitude reaches `threshold` (> 0) are set to 0 and
// listed with their f32 value; rowmax = max |x_f16| of the rest; xq = rint(x_f16 · inv), inv =
// (1 / rowmax) · 127 as torch evaluates 127.0 / row_stats (f32, round half to even), 0 for a zero
// row. Returns rowmax.
float LlmInt8Row(const float* x, int64_t k, float threshold, int8_t* xq,
                 std::vector<std::pair<int64_t, float>>* outliers) {
  thread_local std::vector<float> h;
  thread_local std::vector<int64_t> index;
  h.resize(static_cast<size_t>(k));
  cpu::RoundToF16(x, k, h.data());
  index.clear();
  const float rowmax = cpu::LlmInt8OutliersAndMax(h.data(), k, threshold, &index);
  outliers->clear();
  for (const int64_t i : index) outliers->emplace_back(i, x[i]);
  // torch computes 127.0 / row_stats as reciprocal(row_stats) · 127 (two f32 roundings).
  const float inv = rowmax > 0 ? (1.0f / rowmax) * 127.0f : 0.0f;
  // |h · inv| ≤ 127 for finite h; NaN (and ±Inf without a threshold) quantizes to 0, never an
  // undefined float → int8 cast.
  cpu::LlmInt8Quantize(h.data(), k, inv, xq);
  return rowmax;
}

Int8Scratch& Scratch() {
  static thread_local Int8Scratch s;
  return s;
}
}  // namespace

void MatmulInt8(const float* x, int64_t n, const Int8Weight& w, float* y,
                const MatmulEpilogue* epilogue) {
  const int64_t m = w.rows, k = w.cols, kp = w.k_pad;
  if (n == 0 || m == 0) return;
  Int8Scratch& s = Scratch();
  // AMX-INT8 for prefill-sized batches (exact integer sums: the same bits as the VNNI kernel,
  // so the choice by row count keeps batch invariance); its tiles read rows in 32s.
  const bool amx = cpu::UseAmxInt(n);
  const int64_t n_alloc = amx ? cpu::AmxPaddedRows(n) : n;
  LOOM_CHECK_OK(s.xu.Resize(static_cast<size_t>(n_alloc * kp)));
  s.sx.assign(static_cast<size_t>(n_alloc), 0.0f);
  std::fill(s.xu.data() + n * kp, s.xu.data() + n_alloc * kp, uint8_t{128});
  if (w.llm_int8 && s.outliers.size() < static_cast<size_t>(n)) s.outliers.resize(static_cast<size_t>(n));
  ForEachRowRange(n, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      // xq in −127..127 written in place, then biased: xq ^ 0x80 = xq + 128 as u8 (and the
      // padding 0 becomes 128).
      uint8_t* xu = s.xu.data() + r * kp;
      if (w.llm_int8) {  // sx = rowmax; the kernels' acc · (rowmax · SCB) is bitsandbytes' product
        s.sx[static_cast<size_t>(r)] =
            LlmInt8Row(x + r * k, k, w.outlier_threshold, reinterpret_cast<int8_t*>(xu),
                       &s.outliers[static_cast<size_t>(r)]);
      } else {
        cpu::QuantizeRowsInt8(x + r * k, 1, k, reinterpret_cast<int8_t*>(xu),
                              &s.sx[static_cast<size_t>(r)]);
      }
      std::fill(xu + k, xu + kp, uint8_t{0});
      for (int64_t i = 0; i < kp; ++i) xu[i] ^= 0x80;
    }
  });
  const cpu::Isa isa = cpu::ActiveIsa();
  ForEachPanelBlock(m, n, epilogue, [&](int64_t j0, int64_t j1) {
    if (amx) {
      cpu::MatmulInt8Amx(s.xu.data(), s.sx.data(), n, kp, w.q.data(), w.scale.data(), w.sum.data(),
                         j0, j1, y + j0, m);
    } else {
      cpu::SidePrefetch side;
      if (epilogue != nullptr && epilogue->prefetch) epilogue->prefetch(j0, j1, &side);
      cpu::MatmulInt8(isa, s.xu.data(), s.sx.data(), n, kp, w.q.data(), w.scale.data(),
                      w.sum.data(), j0, j1, y + j0, m, side.count > 0 ? &side : nullptr);
    }
    if (!w.llm_int8) return;
    // bitsandbytes' int8_mm_dequant: acc · (rowmax · SCB) · 6.200124e-05 (its f32 constant for
    // 1/127²); then the outliers exactly, y[r, j] += Σ x[r, i] · W[j, i] over the row's outliers
    // (its addmm of the outlier columns by the dequantized weight columns).
    for (int64_t r = 0; r < n; ++r) {
      float* yr = y + r * m;
      for (int64_t j = j0; j < j1; ++j) yr[j] *= kLlmInt8Dequant;
      const auto& outl = s.outliers[static_cast<size_t>(r)];
      if (outl.empty()) continue;
      for (int64_t j = j0; j < j1; ++j) {
        float t = 0;
        for (const auto& [i, v] : outl) t = std::fma(v, w.Dequantized(j, i), t);
        yr[j] += t;
      }
    }
  });
}

}  // namespace loom
