// Int4 matmul op: group-wise weight quantization at load; activation quantization + column blocks over the pool.
#include "ops/matmul_int4.h"

#include <algorithm>
#include <cmath>

#include "base/check.h"
#include "base/thread_pool.h"
#include "cpu/int4_cpu.h"
#include "cpu/int8_cpu.h"
#include "ops/panel_blocks.h"
#include "tensor/dtype.h"

namespace loom {

float Int4Weight::Scale(int64_t j, int64_t g) const {
  const int64_t p = j / cpu::kInt4Panel, c = j % cpu::kInt4Panel;
  return F16ToF32(scale[static_cast<size_t>((p * (k_pad / group) + g) * cpu::kInt4Panel + c)]);
}

float Int4Weight::Dequantized(int64_t j, int64_t i) const {
  const int64_t p = j / cpu::kInt4Panel, c = j % cpu::kInt4Panel;
  const int64_t k = inv.empty() ? i : inv[static_cast<size_t>(i)];
  const int8_t v = cpu::UnpackInt4(q.data() + p * cpu::kInt4Panel * (k_pad / 2), c, k);
  if (zero.empty()) return Scale(j, k / group) * v;
  const int z = zero[static_cast<size_t>((p * (k_pad / group) + k / group) * cpu::kInt4Panel + c)];
  return Scale(j, k / group) * static_cast<float>(v + 8 - z);  // exact: |u − z| ≤ 16
}

int Int4GroupFor(int64_t in, int requested) {
  if (requested != 32 && requested != 64 && requested != 128) return 0;
  for (int g : {requested, 64, 32}) {
    if (g <= requested && in % g == 0) return g;
  }
  return 0;
}

StatusOr<std::unique_ptr<Int4Weight>> QuantizeWeightInt4(const Tensor& w, const std::string& name,
                                                          int group) {
  if (w.rank() != 2) return InvalidArgument("quantizing " + name + ": not a matrix");
  if (w.dtype != DType::kF32 && w.dtype != DType::kF16 && w.dtype != DType::kBF16) {
    return InvalidArgument("quantizing " + name + ": int4 needs an F32/F16/BF16 weight");
  }
  if (group != 32 && group != 64 && group != 128) {
    return InvalidArgument("quantizing " + name + ": int4 group size " + std::to_string(group) +
                           " is not 32, 64 or 128");
  }
  auto out = std::make_unique<Int4Weight>();
  out->rows = w.dim(0);
  out->cols = w.dim(1);
  out->group = group;
  out->k_pad = (out->cols + cpu::kInt4Chunk - 1) / cpu::kInt4Chunk * cpu::kInt4Chunk;
  if (out->cols > cpu::kMaxInt8Depth) {
    return InvalidArgument("quantizing " + name + ": " + std::to_string(out->cols) +
                           " input features exceed the int4 kernels' " +
                           std::to_string(cpu::kMaxInt8Depth));
  }
  const int64_t kp = out->k_pad, groups = kp / group, cols = out->cols, rows = out->rows;
  constexpr int64_t kPanel = cpu::kInt4Panel;
  out->panels = (rows + kPanel - 1) / kPanel;
  RETURN_IF_ERROR(out->q.Resize(static_cast<size_t>(out->panels * kPanel * kp / 2)));
  out->scale.assign(static_cast<size_t>(out->panels * groups * kPanel), 0);
  const size_t row_bytes = static_cast<size_t>(cols) * DTypeSize(w.dtype);
  std::vector<uint8_t> bad(static_cast<size_t>(rows), 0);
  ThreadPool::Global().ParallelFor(out->panels, [&](int64_t p, int) {
    thread_local std::vector<float> row;
    thread_local std::vector<int8_t> q;  // [16, kp]: the panel's rows (zero past the matrix)
    q.assign(static_cast<size_t>(kPanel * kp), 0);
    for (int64_t c = 0; c < kPanel && p * kPanel + c < rows; ++c) {
      const int64_t j = p * kPanel + c;
      row.assign(static_cast<size_t>(kp), 0.0f);
      ConvertToF32(w.dtype, static_cast<const uint8_t*>(w.data) + static_cast<size_t>(j) * row_bytes,
                   row.data(), cols);
      for (int64_t g = 0; g < groups; ++g) {
        const float* v = row.data() + g * group;
        float m = 0;
        bool finite = true;
        for (int i = 0; i < group; ++i) {
          finite = finite && std::isfinite(v[i]);
          if (std::fabs(v[i]) > std::fabs(m)) m = v[i];
        }
        const uint16_t d16 = F32ToF16(m / -8.0f);
        const float d = F16ToF32(d16);
        if (!finite || !std::isfinite(d)) {
          bad[static_cast<size_t>(j)] = 1;
          break;
        }
        out->scale[static_cast<size_t>((p * groups + g) * kPanel + c)] = d16;
        if (d == 0) continue;  // an all-zero group (or one below f16's range) stays 0
        for (int i = 0; i < group; ++i) {
          const float r = std::nearbyint(v[i] / d);
          q[static_cast<size_t>(c * kp + g * group + i)] = static_cast<int8_t>(std::clamp(r, -8.0f, 7.0f));
        }
      }
    }
    cpu::PackInt4Panel(q.data(), kp, out->q.data() + p * kPanel * kp / 2);
  });
  for (size_t j = 0; j < bad.size(); ++j) {
    if (bad[j]) {
      return InvalidArgument("quantizing " + name + ": row " + std::to_string(j) +
                             " has a weight that is not finite or too large for an f16 group scale");
    }
  }
  return out;
}

StatusOr<std::unique_ptr<Int4Weight>> Int4WeightFromRows(const int8_t* q, const uint16_t* scale,
                                                         int64_t rows, int64_t cols, int group,
                                                         const std::string& name) {
  if (group != 32 && group != 64 && group != 128) {
    return InvalidArgument(name + ": int4 group size " + std::to_string(group) + " is not 32, 64 or 128");
  }
  if (cols % group != 0 || cols > cpu::kMaxInt8Depth) {
    return InvalidArgument(name + ": " + std::to_string(cols) + " input features are not a multiple "
                           "of the group size " + std::to_string(group) + " within the int4 kernels' " +
                           std::to_string(cpu::kMaxInt8Depth));
  }
  auto out = std::make_unique<Int4Weight>();
  out->rows = rows;
  out->cols = cols;
  out->group = group;
  out->k_pad = (cols + cpu::kInt4Chunk - 1) / cpu::kInt4Chunk * cpu::kInt4Chunk;
  constexpr int64_t kPanel = cpu::kInt4Panel;
  const int64_t kp = out->k_pad, groups = kp / group, file_groups = cols / group;
  out->panels = (rows + kPanel - 1) / kPanel;
  RETURN_IF_ERROR(out->q.Resize(static_cast<size_t>(out->panels * kPanel * kp / 2)));
  out->scale.assign(static_cast<size_t>(out->panels * groups * kPanel), 0);  // padded groups: 0
  std::vector<int8_t> panel(static_cast<size_t>(kPanel * kp));  // [16, kp], zero past the matrix
  for (int64_t p = 0; p < out->panels; ++p) {
    std::fill(panel.begin(), panel.end(), int8_t{0});
    for (int64_t c = 0; c < kPanel && p * kPanel + c < rows; ++c) {
      const int64_t j = p * kPanel + c;
      for (int64_t i = 0; i < cols; ++i) {
        const int8_t v = q[j * cols + i];
        if (v < -8 || v > 7) {
          return InvalidArgument(name + ": value " + std::to_string(v) + " at [" + std::to_string(j) +
                                 ", " + std::to_string(i) + "] is outside int4's −8..7");
        }
        panel[static_cast<size_t>(c * kp + i)] = v;
      }
      for (int64_t g = 0; g < file_groups; ++g) {
        out->scale[static_cast<size_t>((p * groups + g) * kPanel + c)] = scale[j * file_groups + g];
      }
    }
    cpu::PackInt4Panel(panel.data(), kp, out->q.data() + p * kPanel * kp / 2);
  }
  return out;
}

StatusOr<std::unique_ptr<Int4Weight>> Int4WeightAsymmetric(const uint8_t* u, const uint16_t* scale,
                                                           const uint8_t* zero,
                                                           std::vector<int32_t> perm, int64_t rows,
                                                           int64_t cols, int group,
                                                           const std::string& name) {
  std::vector<int8_t> q(static_cast<size_t>(rows * cols));
  for (size_t e = 0; e < q.size(); ++e) {
    if (u[e] > 15) return InvalidArgument(name + ": nibble " + std::to_string(u[e]) + " is outside 0..15");
    q[e] = static_cast<int8_t>(u[e] - 8);
  }
  ASSIGN_OR_RETURN(std::unique_ptr<Int4Weight> w, Int4WeightFromRows(q.data(), scale, rows, cols, group, name));
  const int64_t groups = w->k_pad / group, file_groups = cols / group;
  w->zero.assign(static_cast<size_t>(w->panels * groups * cpu::kInt4Panel), 0);
  for (int64_t j = 0; j < rows; ++j) {
    for (int64_t g = 0; g < file_groups; ++g) {
      const uint8_t z = zero[j * file_groups + g];
      if (z > 16) {
        return InvalidArgument(name + ": zero point " + std::to_string(z) + " at [" + std::to_string(j) +
                               ", " + std::to_string(g) + "] is outside 0..16");
      }
      const int64_t p = j / cpu::kInt4Panel, c = j % cpu::kInt4Panel;
      w->zero[static_cast<size_t>((p * groups + g) * cpu::kInt4Panel + c)] = z;
    }
  }
  if (!perm.empty()) {
    if (static_cast<int64_t>(perm.size()) != cols) return InvalidArgument(name + ": permutation of the wrong length");
    w->inv.assign(perm.size(), -1);
    for (size_t k = 0; k < perm.size(); ++k) {
      const int32_t i = perm[k];
      if (i < 0 || i >= cols || w->inv[static_cast<size_t>(i)] != -1) {
        return InvalidArgument(name + ": input order is not a permutation (input " + std::to_string(i) + ")");
      }
      w->inv[static_cast<size_t>(i)] = static_cast<int32_t>(k);
    }
    w->perm = std::move(perm);
  }
  return w;
}

namespace {
// Quantized, zero-padded activation rows, their scales and corrections, owned by the calling
// thread.
struct Int4Scratch {
  AlignedBuffer<int8_t> xq;     // [n, k_pad]
  AlignedBuffer<int32_t> corr;  // [n, k_pad / group] (asymmetric: the group sums)
  std::vector<float> sx;        // [n]
};
Int4Scratch& Scratch() {
  static thread_local Int4Scratch s;
  return s;
}
}  // namespace

void MatmulInt4(const float* x, int64_t n, const Int4Weight& w, float* y,
                const MatmulEpilogue* epilogue) {
  const int64_t m = w.rows, k = w.cols, kp = w.k_pad;
  if (n == 0 || m == 0) return;
  Int4Scratch& s = Scratch();
  // AMX-INT8 tiles for prefill (cpu::UseAmxInt, as int8), at groups whose sums a 64-input tile
  // step does not straddle.
  const bool amx = cpu::UseAmxInt(n) && cpu::Int4AmxGroup(w.group);
  const int64_t n_alloc = amx ? cpu::AmxPaddedRows(n) : n;
  LOOM_CHECK_OK(s.xq.Resize(static_cast<size_t>(n_alloc * kp)));
  if (n_alloc > n) std::fill(s.xq.data() + n * kp, s.xq.data() + n_alloc * kp, int8_t{0});
  LOOM_CHECK_OK(s.corr.Resize(static_cast<size_t>(n * kp / w.group)));
  s.sx.resize(static_cast<size_t>(n));
  const int64_t groups = kp / w.group;
  ForEachRowRange(n, [&](int64_t r0, int64_t r1) {
    thread_local std::vector<float> gathered;  // [cols] one row in kernel order (act-order weights)
    for (int64_t r = r0; r < r1; ++r) {
      int8_t* row = s.xq.data() + r * kp;
      const float* xr = x + r * k;
      if (!w.perm.empty()) {  // act order: the row's inputs in kernel order (max |x| unchanged)
        gathered.resize(static_cast<size_t>(k));
        for (int64_t i = 0; i < k; ++i)
          gathered[static_cast<size_t>(i)] = xr[w.perm[static_cast<size_t>(i)]];
        xr = gathered.data();
      }
      cpu::QuantizeRowsInt8(xr, 1, k, row, &s.sx[static_cast<size_t>(r)]);
      std::fill(row + k, row + kp, int8_t{0});
    }
    int8_t* rows = s.xq.data() + r0 * kp;
    int32_t* corr = s.corr.data() + r0 * groups;
    if (w.zero.empty()) {
      cpu::Int4Corrections(rows, r1 - r0, kp, w.group, corr);
    } else {
      cpu::Int4GroupSums(rows, r1 - r0, kp, w.group, corr);
    }
  });
  const cpu::Isa isa = cpu::ActiveIsa();
  if (!w.zero.empty()) {
    ForEachPanelBlock(m, n, epilogue, [&](int64_t j0, int64_t j1) {
      if (amx) {
        cpu::MatmulInt4ZpAmx(s.xq.data(), s.sx.data(), s.corr.data(), n, kp, w.q.data(),
                             w.scale.data(), w.zero.data(), w.group, j0, j1, y + j0, m);
        return;
      }
      cpu::MatmulInt4Zp(isa, s.xq.data(), s.sx.data(), s.corr.data(), n, kp, w.q.data(),
                        w.scale.data(), w.zero.data(), w.group, j0, j1, y + j0, m);
    });
    return;
  }
  ForEachPanelBlock(m, n, epilogue, [&](int64_t j0, int64_t j1) {
    if (amx) {
      cpu::MatmulInt4Amx(s.xq.data(), s.sx.data(), s.corr.data(), n, kp, w.q.data(), w.scale.data(),
                         w.group, j0, j1, y + j0, m);
      return;
    }
    cpu::SidePrefetch side;
    if (epilogue != nullptr && epilogue->prefetch) epilogue->prefetch(j0, j1, &side);
    cpu::MatmulInt4(isa, s.xq.data(), s.sx.data(), s.corr.data(), n, kp, w.q.data(),
                    w.scale.data(), w.group, j0, j1, y + j0, m, side.count > 0 ? &side : nullptr);
  });
}

}  // namespace loom
