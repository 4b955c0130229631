// safetensors parsing with every untrusted field checked before any byte is read through it.
#include "io/safetensors.h"

#include "base/interrupt.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <cstring>
#include <set>

#include "base/json.h"
#include "base/file.h"
#include "base/thread_pool.h"
#include "tensor/finite.h"

namespace loom {

namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

// Element sizes of every dtype the safetensors format defines.
std::optional<size_t> StoredDTypeSize(const std::string& d) {
  static const std::unordered_map<std::string, size_t> kSizes = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1}, {"I16", 2},
      {"U16", 2},  {"F16", 2}, {"BF16", 2}, {"I32", 4},    {"U32", 4},     {"F32", 4},
      {"F64", 8},  {"I64", 8}, {"U64", 8}};
  auto it = kSizes.find(d);
  if (it == kSizes.end()) return std::nullopt;
  return it->second;
}

std::optional<DType> ComputeDType(const std::string& d) {
  if (d == "F32") return DType::kF32;
  if (d == "F16") return DType::kF16;
  if (d == "BF16") return DType::kBF16;
  return std::nullopt;
}

constexpr uint64_t kMaxHeaderBytes = 100ull << 20;  // same limit as the reference library

// An index's weight_map: one string a tensor, and the largest real checkpoints name ~150 K
// tensors; 512 K entries are ~200 MB as a DOM (1.1 M in a 65 MB index built 408 MB).
JsonLimits IndexJsonLimits() {
  JsonLimits limits;
  limits.max_containers = 1024;
  limits.max_values = int64_t{1} << 19;
  return limits;
}
constexpr int64_t kMaxRank = 16;                    // dimensions of one tensor (real ones: 1-5)
constexpr size_t kMaxTensorNameBytes = 4096;

}  // namespace

StatusOr<std::vector<TensorInfo>> ParseSafetensors(const uint8_t* bytes, size_t size,
                                                   const std::string& path,
                                                   std::map<std::string, std::string>* metadata) {
  if (size < 8) {
    if (size == 0) return InvalidArgument(path + ": empty file (0 bytes), not a safetensors file");
    return InvalidArgument(path + ": file is " + std::to_string(size) +
                           " bytes, too short for a safetensors header");
  }
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | bytes[i];
  if (header_len > size - 8) {
    // A git-LFS pointer is a small text file starting with "version https://git-lfs".
    static const char kLfs[] = "version https://git-lfs";
    if (size >= sizeof(kLfs) - 1 && std::equal(kLfs, kLfs + sizeof(kLfs) - 1, bytes)) {
      return InvalidArgument(path +
                             ": is a git-LFS pointer file, not the tensor data; fetch it with "
                             "`git lfs pull`");
    }
    if (header_len > kMaxHeaderBytes) {
      // Not a length at all: quoting it would print the first 8 bytes of whatever file this is.
      return InvalidArgument(path +
                             ": not a safetensors file (its first 8 bytes are no header "
                             "length)");
    }
    return InvalidArgument(path + ": header length " + std::to_string(header_len) +
                           " exceeds the file size " + std::to_string(size));
  }
  if (header_len > kMaxHeaderBytes) {
    return InvalidArgument(path + ": header length " + std::to_string(header_len) +
                           " exceeds the 100 MiB limit");
  }
  const char* header = reinterpret_cast<const char*>(bytes + 8);
  JsonLimits limits;
  limits.max_bytes = kMaxHeaderBytes;
  limits.max_depth = 8;  // a header nests 3 levels
  limits.max_array_elements = kMaxRank;  // shapes and data_offsets are its only arrays
  // 3 containers and ~9 values a tensor: ~170 K tensors in one file (a real shard holds a few
  // thousand), a DOM of ~70 MB at most (1.7 M empty tensors in a 99 MB header built 1.6 GB).
  limits.max_containers = int64_t{1} << 19;
  limits.max_values = int64_t{1} << 21;
  auto parsed = ParseJson(std::string_view(header, header_len), path + ": header", limits);
  if (!parsed.ok()) {
    if (parsed.status().message().find("nested deeper") != std::string::npos ||
        parsed.status().message().find("elements") != std::string::npos ||
        parsed.status().message().find("more than") != std::string::npos) {
      return parsed.status();
    }
    return InvalidArgument(path + ": header is not valid JSON");
  }
  json j = std::move(parsed).value();
  if (!j.is_object()) return InvalidArgument(path + ": header is not a JSON object");

  const uint8_t* data = bytes + 8 + header_len;
  const uint64_t data_size = size - 8 - header_len;
  std::vector<TensorInfo> out;
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& name = it.key();
    const json& v = it.value();
    if (name == "__metadata__") {
      if (!v.is_object()) return InvalidArgument(path + ": __metadata__ is not an object");
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (!m.value().is_string()) {
          return InvalidArgument(path + ": __metadata__ value '" + m.key() + "' is not a string");
        }
        if (metadata) (*metadata)[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    // Names are short (HF's longest are ~100 bytes); a megabyte one made name-suffix lookups
    // quadratic (inspect ran minutes) and would be quoted whole in errors.
    if (name.size() > kMaxTensorNameBytes) {
      return InvalidArgument(path + ": tensor name '" + name.substr(0, 64) + "...' is " +
                             std::to_string(name.size()) + " bytes, above the limit of " +
                             std::to_string(kMaxTensorNameBytes));
    }
    const std::string where = path + ": tensor '" + name + "'";
    if (!v.is_object()) return InvalidArgument(where + ": entry is not an object");
    auto dt = v.find("dtype");
    auto sh = v.find("shape");
    auto off = v.find("data_offsets");
    if (dt == v.end() || !dt->is_string()) return InvalidArgument(where + ": missing dtype");
    if (sh == v.end() || !sh->is_array()) return InvalidArgument(where + ": missing shape");
    if (off == v.end() || !off->is_array() || off->size() != 2) {
      return InvalidArgument(where + ": data_offsets must be [begin, end]");
    }
    TensorInfo info;
    info.name = name;
    info.file = path;
    info.dtype_name = dt->get<std::string>();
    auto elem = StoredDTypeSize(info.dtype_name);
    if (!elem) return InvalidArgument(where + ": unknown dtype '" + info.dtype_name + "'");
    info.dtype = ComputeDType(info.dtype_name);
    uint64_t numel = 1;
    for (const json& d : *sh) {
      if (!d.is_number_unsigned()) {
        return InvalidArgument(where + ": shape entries must be non-negative integers");
      }
      uint64_t dim = d.get<uint64_t>();
      // A dimension must fit int64 even when another dimension is 0 (numel stays 0).
      if (dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
          (dim != 0 && numel > std::numeric_limits<uint64_t>::max() / 8 / dim)) {
        return InvalidArgument(where + ": shape is too large");
      }
      numel *= dim;
      info.shape.push_back(static_cast<int64_t>(dim));
    }
    if (!(*off)[0].is_number_unsigned() || !(*off)[1].is_number_unsigned()) {
      return InvalidArgument(where + ": data_offsets must be non-negative integers");
    }
    uint64_t begin = (*off)[0].get<uint64_t>();
    uint64_t end = (*off)[1].get<uint64_t>();
    if (begin > end || end > data_size) {
      return InvalidArgument(where + ": data_offsets [" + std::to_string(begin) + ", " +
                             std::to_string(end) + "] out of range (data section is " +
                             std::to_string(data_size) + " bytes)");
    }
    if (numel * *elem != end - begin) {
      return InvalidArgument(where + ": shape " + ShapeString(info.shape) + " × " +
                             info.dtype_name + " needs " + std::to_string(numel * *elem) +
                             " bytes but data_offsets span " + std::to_string(end - begin));
    }
    info.data = data + begin;
    info.nbytes = end - begin;
    ranges.emplace_back(begin, end);
    out.push_back(std::move(info));
  }
  // The tensors tile the data section exactly, as the reference library requires (its
  // validate(): no overlap, no gap, no byte past the last tensor), so a file transformers and
  // vLLM refuse is refused here too, and no bytes ride along unread. Sorted by (begin, end), an
  // empty tensor sits where the previous one ended.
  std::vector<size_t> order(out.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return ranges[a] < ranges[b]; });
  uint64_t cursor = 0;
  const std::string* previous = nullptr;
  for (size_t i : order) {
    const auto& cur = ranges[i];
    if (cur.first < cursor) {
      return InvalidArgument(path + ": tensors '" + *previous + "' and '" + out[i].name +
                             "' overlap in the data section");
    }
    if (cur.first > cursor) {
      return InvalidArgument(path + ": " + std::to_string(cur.first - cursor) +
                             " unused bytes before tensor '" + out[i].name +
                             "' in the data section (at offset " + std::to_string(cursor) +
                             "; the format has none)");
    }
    cursor = cur.second;
    previous = &out[i].name;
  }
  if (cursor != data_size) {
    return InvalidArgument(path + ": " + std::to_string(data_size - cursor) +
                           " bytes after the last tensor (the data section is " +
                           std::to_string(data_size) + " bytes, the tensors end at " +
                           std::to_string(cursor) + ")");
  }
  return out;
}

Status SafetensorsStore::AddFile(const std::string& path,
                                 const std::vector<std::string>* expected, bool in_memory) {
  ASSIGN_OR_RETURN(auto file, in_memory ? MappedFile::ReadIntoMemory(path) : MappedFile::Open(path));
  ASSIGN_OR_RETURN(auto infos, ParseSafetensors(file->data(), file->size(), path, &metadata_));
  std::set<std::string> here;
  for (auto& info : infos) {
    // The format does not require data offsets to be multiples of the element size (and a
    // header not padded to 8 bytes shifts every tensor): such a tensor is copied to aligned
    // memory, so kernels can load its elements directly without undefined behaviour.
    const size_t elem = StoredDTypeSize(info.dtype_name).value_or(1);
    if (elem > 1 && reinterpret_cast<uintptr_t>(info.data) % elem != 0) {
      auto copy = std::make_unique<AlignedBuffer<uint8_t>>();
      Status st = copy->Resize(info.nbytes);
      if (!st.ok()) return Status(st.code(), path + ": tensor '" + info.name + "': " + st.message());
      std::memcpy(copy->data(), info.data, info.nbytes);
      info.data = copy->data();
      copies_.push_back(std::move(copy));
    }
    if (tensors_.count(info.name)) {
      return InvalidArgument(path + ": tensor '" + info.name + "' also appears in " +
                             tensors_[info.name].file);
    }
    here.insert(info.name);
    names_.push_back(info.name);
    total_bytes_ += info.nbytes;
    tensors_.emplace(info.name, std::move(info));
  }
  if (expected) {
    for (const auto& name : *expected) {
      if (!here.count(name)) {
        return InvalidArgument("the index maps tensor '" + name + "' to " + path +
                               ", which does not contain it");
      }
    }
  }
  mapped_.push_back(std::move(file));
  files_.push_back(path);
  return OkStatus();
}

StatusOr<std::unique_ptr<SafetensorsStore>> SafetensorsStore::Open(const std::string& path,
                                                                   const std::string& stem,
                                                                   bool in_memory) {
  std::unique_ptr<SafetensorsStore> store(new SafetensorsStore());
  std::string index_path;
  std::string file_path;
  ASSIGN_OR_RETURN(const bool is_dir, IsDirectory(path));
  if (is_dir) {
    const std::string index = path + "/" + stem + ".safetensors.index.json";
    const std::string single = path + "/" + stem + ".safetensors";
    ASSIGN_OR_RETURN(const bool has_index, RegularFileExists(index));
    ASSIGN_OR_RETURN(const bool has_single, RegularFileExists(single));
    if (has_index && has_single) {
      // transformers reads the single file, vLLM the index's shards: unless the index names
      // only that file (mlx-lm writes one even for a single shard), the same folder would serve
      // different weights depending on the reader.
      ASSIGN_OR_RETURN(std::string text, ReadFileBounded(index, kMaxConfigFileBytes * 4));
      ASSIGN_OR_RETURN(json j, ParseJson(text, index, IndexJsonLimits()));
      const auto wm = j.is_object() ? j.find("weight_map") : j.end();
      const bool only_single =
          wm != j.end() && wm->is_object() && !wm->empty() &&
          std::all_of(wm->begin(), wm->end(), [&](const json& f) {
            return f.is_string() && f.get<std::string>() == stem + ".safetensors";
          });
      if (!only_single) {
        return InvalidArgument(path + ": has both " + stem + ".safetensors and " + stem +
                               ".safetensors.index.json naming other shards; transformers reads "
                               "the first and vLLM the second, so which weights are meant is "
                               "ambiguous: remove one");
      }
    }
    if (has_index && !has_single) {
      index_path = index;
    } else {
      if (!has_single) {
        return NotFound(path + ": no " + stem + ".safetensors or " + stem +
                        ".safetensors.index.json");
      }
      file_path = single;
    }
  } else if (path.size() > 5 && path.substr(path.size() - 5) == ".json") {
    index_path = path;
  } else {
    file_path = path;
  }
  if (!file_path.empty()) {
    RETURN_IF_ERROR(store->AddFile(file_path, nullptr, in_memory));
    store->source_ = file_path;
    return store;
  }
  store->source_ = index_path;
  ASSIGN_OR_RETURN(std::string text, ReadFileBounded(index_path, kMaxConfigFileBytes * 4));
  ASSIGN_OR_RETURN(json j, ParseJson(text, index_path, IndexJsonLimits()));
  if (!j.is_object()) return InvalidArgument(index_path + ": not a valid JSON object");
  auto wm = j.find("weight_map");
  if (wm == j.end() || !wm->is_object() || wm->empty()) {
    return InvalidArgument(index_path + ": missing or empty 'weight_map'");
  }
  std::map<std::string, std::vector<std::string>> by_file;
  for (auto it = wm->begin(); it != wm->end(); ++it) {
    if (!it.value().is_string()) {
      return InvalidArgument(index_path + ": weight_map entry '" + it.key() + "' is not a string");
    }
    std::string shard = it.value().get<std::string>();
    if (shard.empty() || shard.find('/') != std::string::npos || shard == "." ||
        shard.find("..") != std::string::npos || shard.find('\0') != std::string::npos) {
      return InvalidArgument(index_path + ": shard name '" + shard +
                             "' must be a file name in the same folder");
    }
    by_file[shard].push_back(it.key());
  }
  fs::path dir = fs::path(index_path).parent_path();
  for (const auto& [shard, names] : by_file) {
    RETURN_IF_ERROR(store->AddFile((dir / shard).string(), &names, in_memory));
  }
  return store;
}

const TensorInfo* SafetensorsStore::Find(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

std::vector<std::pair<const uint8_t*, size_t>> SafetensorsStore::file_bytes() const {
  std::vector<std::pair<const uint8_t*, size_t>> out;
  for (const auto& m : mapped_) out.emplace_back(m->data(), m->size());
  return out;
}

StatusOr<Tensor> SafetensorsStore::Get(const std::string& name) const {
  const TensorInfo* info = Find(name);
  if (!info) return NotFound("tensor '" + name + "' not found in " + source_);
  if (!info->dtype) {
    return InvalidArgument(info->file + ": tensor '" + name + "' has dtype " + info->dtype_name +
                           "; loom computes with F32, F16 and BF16 tensors only");
  }
  Tensor t;
  t.dtype = *info->dtype;
  t.shape = info->shape;
  t.data = info->data;
  return t;
}

uint64_t TensorSpecBytes(const TensorSpec& spec) {
  uint64_t n = spec.stored_dtype.empty() ? DTypeSize(spec.dtype)
                                         : StoredDTypeSize(spec.stored_dtype).value_or(0);
  for (int64_t d : spec.shape) n *= static_cast<uint64_t>(d);
  return n;
}

Status WriteSafetensorsStreaming(const std::string& path, const std::vector<TensorSpec>& specs,
                                 const std::function<Status(size_t, void*)>& fill,
                                 const std::map<std::string, std::string>& metadata) {
  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  std::vector<uint64_t> sizes;
  for (const auto& t : specs) {
    if (!t.stored_dtype.empty() && !StoredDTypeSize(t.stored_dtype)) {
      return InvalidArgument(path + ": tensor '" + t.name + "': unknown dtype '" + t.stored_dtype + "'");
    }
    const uint64_t n = TensorSpecBytes(t);
    header[t.name] = {{"dtype", t.stored_dtype.empty() ? std::string(DTypeName(t.dtype)) : t.stored_dtype},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + n}}};
    offset += n;
    sizes.push_back(n);
  }
  ASSIGN_OR_RETURN(std::string h, JsonForFile(header, -1, path + ": header"));
  while (h.size() % 8 != 0) h.push_back(' ');
  const std::string tmp = path + ".tmp";
  std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
  if (!out) return InvalidArgument(path + ": cannot open for writing");
  uint64_t len = h.size();
  char len_bytes[8];
  for (int i = 0; i < 8; ++i) len_bytes[i] = static_cast<char>((len >> (8 * i)) & 0xff);
  out.write(len_bytes, 8);
  out.write(h.data(), static_cast<std::streamsize>(h.size()));
  std::vector<uint8_t> buf;
  for (size_t i = 0; i < specs.size(); ++i) {
    Status st;
    try {
      buf.resize(sizes[i]);
    } catch (const std::exception&) {
      st = ResourceExhausted(path + ": cannot allocate " + std::to_string(sizes[i]) +
                             " bytes for tensor '" + specs[i].name + "'");
    }
    // Interrupted (a section's signal) or the stream already failed (disk full): stop here
    // rather than computing the rest of the shard for nothing.
    if (st.ok() && Interrupted()) st = InterruptedError(path);
    if (st.ok() && !out) st = Internal(path + ": write failed (disk full?)");
    if (st.ok()) st = fill(i, buf.data());
    if (!st.ok()) {
      out.close();
      std::error_code ec;
      fs::remove(tmp, ec);
      return st;
    }
    out.write(reinterpret_cast<const char*>(buf.data()), static_cast<std::streamsize>(buf.size()));
  }
  out.close();
  std::error_code ec;
  if (!out) {
    fs::remove(tmp, ec);  // a partial file is not left behind
    return Internal(path + ": write failed (disk full?)");
  }
  fs::rename(tmp, path, ec);
  if (ec) {
    const std::string why = ec.message();
    fs::remove(tmp, ec);
    return Internal(path + ": rename failed: " + why);
  }
  return OkStatus();
}

Status WriteSafetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                        const std::map<std::string, std::string>& metadata) {
  std::vector<TensorSpec> specs;
  for (const auto& t : tensors) specs.push_back({t.name, t.dtype, t.shape});
  return WriteSafetensorsStreaming(
      path, specs,
      [&](size_t i, void* dst) {
        uint64_t n = DTypeSize(tensors[i].dtype);
        for (int64_t d : tensors[i].shape) n *= static_cast<uint64_t>(d);
        std::memcpy(dst, tensors[i].data, n);
        return OkStatus();
      },
      metadata);
}

Status CheckStoreFinite(const SafetensorsStore& store, const std::string& where) {
  // Work is split into chunks of at most kChunk elements across all tensors, so one huge tensor
  // (the embedding is a quarter of a small model) does not leave the other threads idle.
  constexpr int64_t kChunk = int64_t{1} << 21;
  struct Chunk {
    const TensorInfo* info;
    int64_t start, len;
  };
  std::vector<Chunk> chunks;
  for (const std::string& name : store.names()) {
    const TensorInfo* info = store.Find(name);
    if (info == nullptr || !info->dtype) continue;  // not a computed dtype: never read as weights
    int64_t n = 1;
    for (int64_t d : info->shape) n *= d;  // validated against the byte size at open
    for (int64_t s = 0; s < n; s += kChunk) chunks.push_back({info, s, std::min(kChunk, n - s)});
  }
  std::vector<int64_t> bad(chunks.size(), -1);  // first bad index within the tensor, per chunk
  ThreadPool::Global().ParallelFor(static_cast<int64_t>(chunks.size()), [&](int64_t i, int) {
    const Chunk& c = chunks[static_cast<size_t>(i)];
    const size_t esize = DTypeSize(*c.info->dtype);
    const int64_t at = FindNonFinite(*c.info->dtype,
                                     static_cast<const uint8_t*>(c.info->data) + c.start * esize, c.len);
    if (at >= 0) bad[static_cast<size_t>(i)] = c.start + at;
  });
  for (size_t i = 0; i < chunks.size(); ++i) {  // chunks are in file order: the first bad wins
    if (bad[i] < 0) continue;
    const TensorInfo* info = chunks[i].info;
    Tensor t;
    t.dtype = *info->dtype;
    t.shape = info->shape;
    t.data = info->data;
    return NonFiniteError(t, bad[i], info->name, where.empty() ? info->file : where);
  }
  return OkStatus();
}

}  // namespace loom
