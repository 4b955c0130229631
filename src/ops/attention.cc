// Attention: one task per (row, KV head) for its query heads; keys gathered block by block from the
// cache.
#include "ops/attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/check.h"
#include "base/thread_pool.h"
#include "cpu/attention_cpu.h"
#include "tensor/dtype.h"
#include "tensor/tensor.h"

namespace loom {

const char* KvDtypeName(KvDtype dtype) { return dtype == KvDtype::kBf16 ? "bfloat16" : "float32"; }

namespace {
inline void StoreKv(float x, float* dst) { *dst = x; }
inline void StoreKv(float x, uint16_t* dst) { *dst = F32ToBf16(x); }

template <typename T>
void WriteKvT(const KvLayerView& cache, const std::vector<AttentionChunk>& chunks, const float* k,
              const float* v) {
  const int hd = cache.head_dim;
  const int kvh = cache.num_kv_heads;
  T* const kc = static_cast<T*>(cache.k);
  T* const vc = static_cast<T*>(cache.v);
  for (const auto& c : chunks) {
    for (int i = 0; i < c.num_rows; ++i) {
      const int pos = c.start_pos + i;
      const int64_t block = c.block_table[pos / kKvBlockSize];
      const int slot = pos % kKvBlockSize;
      const int64_t row = c.first_row + i;
      for (int h = 0; h < kvh; ++h) {
        const int64_t head = block * cache.block_stride() + int64_t{h} * kKvBlockSize * hd;
        const float* kr = k + (row * kvh + h) * hd;
        const float* vr = v + (row * kvh + h) * hd;
        T* kt = kc + head;  // K transposed, element (slot, d) at KeyIndex
        T* vt = vc + head + int64_t{slot} * hd;
        for (int d = 0; d < hd; ++d) StoreKv(kr[d], kt + cpu::KeyIndex<T>(slot, d));
        for (int d = 0; d < hd; ++d) StoreKv(vr[d], vt + d);
      }
    }
  }
}
}  // namespace

void WriteKv(const KvLayerView& cache, const std::vector<AttentionChunk>& chunks, const float* k,
             const float* v) {
  // The bf16 layout pairs K's dimensions (KvCache refuses an odd head_dim for it).
  LOOM_CHECK(cache.dtype != KvDtype::kBf16 || cache.head_dim % 2 == 0);
  if (cache.dtype == KvDtype::kBf16) return WriteKvT<uint16_t>(cache, chunks, k, v);
  WriteKvT<float>(cache, chunks, k, v);
}

void Attention(const KvLayerView& cache, const std::vector<AttentionChunk>& chunks,
               const float* q, int num_heads, int window, float scale, float* out,
               float softcap) {
  const int hd = cache.head_dim;
  const int kv_heads = cache.num_kv_heads;
  LOOM_CHECK(kv_heads > 0 && num_heads % kv_heads == 0);  // each task covers one whole group
  LOOM_CHECK(cache.dtype != KvDtype::kBf16 || hd % 2 == 0);  // K's bf16 dimension pairs
  const int group = num_heads / kv_heads;
  // Task index → (chunk, row in chunk, KV head): the `group` query heads of one KV head run in
  // one call, which loads each V row once for several of them (bitwise as one call per head).
  std::vector<int64_t> chunk_first_task(chunks.size() + 1, 0);
  for (size_t c = 0; c < chunks.size(); ++c) {
    chunk_first_task[c + 1] = chunk_first_task[c] + int64_t{chunks[c].num_rows} * kv_heads;
  }
  int max_len = 0;
  for (const auto& c : chunks) max_len = std::max(max_len, c.start_pos + c.num_rows);
  const cpu::Isa isa = cpu::ActiveIsa();
  const int64_t num_tasks = chunk_first_task.back();
  auto task_fn = [&](int64_t task, int) {
    const size_t c = static_cast<size_t>(
        std::upper_bound(chunk_first_task.begin(), chunk_first_task.end(), task) -
        chunk_first_task.begin() - 1);
    const AttentionChunk& ch = chunks[c];
    const int64_t local = task - chunk_first_task[c];
    const int i = static_cast<int>(local / kv_heads);
    const int kv_head = static_cast<int>(local % kv_heads);
    const int h = kv_head * group;  // the first of its query heads
    const int64_t row = ch.first_row + i;
    const int pos = ch.start_pos + i;
    const int first = window > 0 ? std::max(0, pos - window + 1) : 0;
    // Declared here, on the thread that runs the task: a block-scope thread_local declared in
    // the enclosing function would be used by the workers without ever being constructed there
    // (its destructor never registered: LeakSanitizer saw one buffer lost per worker).
    static thread_local AlignedBuffer<float> scores;
    LOOM_CHECK_OK(scores.Resize(static_cast<size_t>(max_len) * static_cast<size_t>(group)));
    auto attend = [&](auto elem) {  // the cache's element type: float or uint16_t (bf16)
      using T = decltype(elem);
      const cpu::PagedKvHeadT<T> head{static_cast<const T*>(cache.k),
                                      static_cast<const T*>(cache.v), cache.block_stride(),
                                      int64_t{kv_head} * kKvBlockSize * hd, ch.block_table};
      cpu::AttendHeads(isa, group, q + (row * num_heads + h) * hd, hd, hd, head, first, pos, scale,
                       softcap, scores.data(), max_len, out + (row * num_heads + h) * hd, hd);
    };
    if (cache.dtype == KvDtype::kBf16) {
      attend(uint16_t{});
    } else {
      attend(float{});
    }
  };
  if (num_tasks * group * max_len * hd < (int64_t{1} << 15)) {  // too small to repay waking workers
    for (int64_t t = 0; t < num_tasks; ++t) task_fn(t, 0);
  } else {
    ThreadPool::Global().ParallelFor(num_tasks, task_fn);
  }
}

}  // namespace loom
