// bitsandbytes 4-bit (NF4/FP4) matmul op: panel packing of validated code indices and absmax; column blocks over the pool.
#include "ops/matmul_nf4.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <numeric>

#include "cpu/nf4_cpu.h"
#include "ops/bnb_double_quant.h"
#include "ops/panel_blocks.h"

namespace loom {

float Nf4Weight::Absmax(int64_t j, int64_t b) const {
  const int64_t p = j / cpu::kNf4Panel, c = j % cpu::kNf4Panel;
  return absmax[static_cast<size_t>((p * (cols / block) + b) * cpu::kNf4Panel + c)];
}

uint8_t Nf4Weight::Code(int64_t j, int64_t i) const {
  const int64_t p = j / cpu::kNf4Panel, c = j % cpu::kNf4Panel;
  return cpu::UnpackNf4(q.data() + p * cpu::kNf4Panel * (cols / 2), c, i);
}

float Nf4Weight::Dequantized(int64_t j, int64_t i) const {
  return cpu::Bnb4Code(type)[Code(j, i)] * Absmax(j, i / block);
}

float Nf4Weight::DequantizedAsStored(int64_t j, int64_t i) const {
  const float w = Dequantized(j, i);
  if (dequant_dtype == DType::kBF16) return Bf16ToF32(F32ToBf16(w));
  if (dequant_dtype == DType::kF16) return F16ToF32(F32ToF16(w));
  return w;
}

StatusOr<std::unique_ptr<Nf4Weight>> Nf4WeightFromRows(
    const uint8_t* q, const float* absmax, int64_t rows, int64_t cols, int64_t block,
    const std::string& name, cpu::Bnb4Type type) {
  if (block <= 0 || block % 2 != 0 || cols <= 0 || cols % block != 0 || rows <= 0) {
    return InvalidArgument(name + ": " + cpu::Bnb4TypeName(type) + " blocks of " +
                           std::to_string(block) +
                           " do not tile rows of " + std::to_string(cols) +
                           " inputs (loom needs an even block size dividing "
                           "in_features)");
  }
  auto out = std::make_unique<Nf4Weight>();
  out->rows = rows;
  out->cols = cols;
  out->block = block;
  out->type = type;
  constexpr int64_t kPanel = cpu::kNf4Panel;
  const int64_t blocks = cols / block;
  out->panels = (rows + kPanel - 1) / kPanel;
  RETURN_IF_ERROR(out->q.Resize(static_cast<size_t>(out->panels * kPanel * cols / 2)));
  out->absmax.assign(static_cast<size_t>(out->panels * blocks * kPanel), 0.0f);  // padding: 0
  std::vector<uint8_t> panel(static_cast<size_t>(kPanel * cols));
  for (int64_t p = 0; p < out->panels; ++p) {
    std::fill(panel.begin(), panel.end(), cpu::Bnb4ZeroIndex(type));  // padding columns: 0.0
    for (int64_t c = 0; c < kPanel && p * kPanel + c < rows; ++c) {
      const int64_t j = p * kPanel + c;
      for (int64_t i = 0; i < cols; ++i) {
        const uint8_t v = q[j * cols + i];
        if (v > 15) {
          return InvalidArgument(name + ": code index " + std::to_string(v) + " at [" +
                                 std::to_string(j) + ", " + std::to_string(i) + "] is not 0..15");
        }
        panel[static_cast<size_t>(c * cols + i)] = v;
      }
      for (int64_t b = 0; b < blocks; ++b) {
        const float a = absmax[j * blocks + b];
        if (!std::isfinite(a)) {
          return InvalidArgument(name + ": absmax " + std::to_string(a) + " of block " +
                                 std::to_string(j * blocks + b) + " is not finite");
        }
        out->absmax[static_cast<size_t>((p * blocks + b) * kPanel + c)] = a;
      }
    }
    cpu::PackNf4Panel(panel.data(), cols, out->q.data() + p * kPanel * cols / 2);
  }
  return out;
}

namespace {
// bitsandbytes' _get_4bit_quantize_bounds: the code sorted by value (a stable argsort: FP4's +0.0
// at index 0 comes before its −0.0 at 8) and the f32 midpoints of neighbours, torch.bucketize's
// boundaries; position → code index through `order`.
struct Bnb4Buckets {
  std::array<uint8_t, 16> order;
  std::array<float, 15> bounds;
  explicit Bnb4Buckets(const float* code) {
    std::iota(order.begin(), order.end(), uint8_t{0});
    std::stable_sort(order.begin(), order.end(),
                     [&](uint8_t a, uint8_t b) { return code[a] < code[b]; });
    for (size_t i = 0; i < 15; ++i) bounds[i] = (code[order[i]] + code[order[i + 1]]) / 2.0f;
  }
};
}  // namespace

StatusOr<std::unique_ptr<Nf4Weight>> QuantizeWeightBnb4(const Tensor& w, const std::string& name,
                                                        cpu::Bnb4Type type, int64_t block,
                                                        bool double_quant) {
  const int64_t rows = w.dim(0), cols = w.dim(1);
  if (block <= 0 || cols % block != 0) {
    return InvalidArgument("quantizing " + name + " to " + cpu::Bnb4TypeName(type) + ": its " +
                           std::to_string(cols) + " input features are not whole blocks of " +
                           std::to_string(block));
  }
  const Bnb4Buckets buckets(cpu::Bnb4Code(type));
  const int64_t blocks = cols / block;
  std::vector<uint8_t> q(static_cast<size_t>(rows * cols));
  std::vector<float> absmax(static_cast<size_t>(rows * blocks)), row(static_cast<size_t>(cols));
  const size_t row_bytes = static_cast<size_t>(cols) * DTypeSize(w.dtype);
  for (int64_t j = 0; j < rows; ++j) {
    ConvertToF32(w.dtype, static_cast<const uint8_t*>(w.data) + j * row_bytes, row.data(), cols);
    for (int64_t b = 0; b < blocks; ++b) {
      const float* x = row.data() + b * block;
      float am = 0;
      for (int64_t i = 0; i < block; ++i) am = std::max(am, std::fabs(x[i]));  // NaN skipped
      bool finite = std::isfinite(am);
      for (int64_t i = 0; i < block && finite; ++i) finite = std::isfinite(x[i]);
      if (!finite) {  // before the double quant reads this absmax (and rejects what it breeds)
        return InvalidArgument("quantizing " + name + " to " + cpu::Bnb4TypeName(type) + ": row " +
                               std::to_string(j) + " has a weight that is not finite");
      }
      absmax[static_cast<size_t>(j * blocks + b)] = am;
      const float inv = 1.0f / std::max(am, 1e-38f);
      for (int64_t i = 0; i < block; ++i) {
        const float v = std::clamp(x[i] * inv, -1.0f, 1.0f);
        size_t pos = 0;  // torch.bucketize (right=False): how many boundaries are below v
        while (pos < 15 && buckets.bounds[pos] < v) ++pos;
        q[static_cast<size_t>(j * cols + b * block + i)] = buckets.order[pos];
      }
    }
  }
  if (double_quant) DoubleQuantizeAbsmax(&absmax);  // the codes above used the f32 absmax
  ASSIGN_OR_RETURN(std::unique_ptr<Nf4Weight> out,
                   Nf4WeightFromRows(q.data(), absmax.data(), rows, cols, block, name, type));
  out->dequant_dtype = w.dtype;
  return out;
}

void MatmulNf4(const float* x, int64_t n, const Nf4Weight& w, float* y,
               const MatmulEpilogue* epilogue) {
  if (n == 0 || w.rows == 0) return;
  const cpu::Isa isa = cpu::ActiveIsa();
  ForEachPanelBlock(w.rows, n, epilogue, [&](int64_t j0, int64_t j1) {
    cpu::MatmulNf4(isa, x, n, w.cols, w.q.data(), w.absmax.data(), w.block, cpu::Bnb4Code(w.type),
                   j0, j1, y + j0, w.rows);
  });
}

}  // namespace loom
