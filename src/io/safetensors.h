// safetensors reader (mmap; single file or sharded with model.safetensors.index.json) and writer.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/mmap_file.h"
#include "base/status.h"
#include "tensor/tensor.h"

namespace loom {

// One tensor as a file describes it. `dtype` is set for the types loom computes with
// (F32, F16, BF16); other valid safetensors types parse but cannot be used as weights.
struct TensorInfo {
  std::string name;
  std::string dtype_name;       // as in the header, e.g. "BF16", "I32"
  std::optional<DType> dtype;   // nullopt for types loom does not compute with
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;  // into the mapped file
  size_t nbytes = 0;
  std::string file;  // path of the file that holds it
};

// Parses and validates a whole safetensors image (8-byte length, JSON header, data).
// Every offset, shape and dtype is checked against the bytes; errors name `path` and the
// tensor. `bytes` must outlive the returned views. Entry point of the fuzz target.
StatusOr<std::vector<TensorInfo>> ParseSafetensors(const uint8_t* bytes, size_t size,
                                                   const std::string& path,
                                                   std::map<std::string, std::string>* metadata);

// All tensors of a checkpoint: one .safetensors file, or shards listed by an index.
// Thread-safety: immutable after Open.
class SafetensorsStore {
 public:
  // `path` is a .safetensors file, a *.safetensors.index.json, or a folder holding one of
  // model.safetensors / model.safetensors.index.json (or `stem` instead of "model").
  // `in_memory`: the files are read into memory (MappedFile::ReadIntoMemory) instead of mapped.
  static StatusOr<std::unique_ptr<SafetensorsStore>> Open(const std::string& path,
                                                          const std::string& stem = "model",
                                                          bool in_memory = false);

  const TensorInfo* Find(const std::string& name) const;
  // The tensor as a computable view; error if absent or of a dtype loom cannot use.
  StatusOr<Tensor> Get(const std::string& name) const;
  const std::vector<std::string>& names() const { return names_; }  // by file, then by name
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const std::vector<std::string>& files() const { return files_; }
  // What lists the tensors: the index file of a sharded checkpoint, else the one file (errors
  // about a tensor that is absent name this).
  const std::string& source() const { return source_; }
  uint64_t total_bytes() const { return total_bytes_; }
  // Each file's bytes as mapped at Open (for identity hashes: the bytes the tensors come from,
  // not a second open that a rename in between could point at another file).
  std::vector<std::pair<const uint8_t*, size_t>> file_bytes() const;

 private:
  Status AddFile(const std::string& path, const std::vector<std::string>* expected, bool in_memory);

  std::vector<std::shared_ptr<MappedFile>> mapped_;
  std::vector<std::unique_ptr<AlignedBuffer<uint8_t>>> copies_;  // tensors stored misaligned
  std::vector<std::string> files_;
  std::string source_;
  std::unordered_map<std::string, TensorInfo> tensors_;
  std::vector<std::string> names_;
  std::map<std::string, std::string> metadata_;
  uint64_t total_bytes_ = 0;
};

// Finite check (no NaN/±Inf) of every F32/F16/BF16 tensor of `store`, threaded over tensors;
// the error names the tensor and its first bad index, led by `where` (default: its file).
Status CheckStoreFinite(const SafetensorsStore& store, const std::string& where);

// One tensor to write: data is row-major bytes of `dtype` (numel * size bytes).
struct TensorToWrite {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  const void* data;
};

// Writes a safetensors file one tensor at a time: `fill(i, dst)` produces tensor i's bytes
// into a buffer of its size (so peak memory is one tensor, whatever the file size).
struct TensorSpec {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  // A safetensors dtype written instead of `dtype` when set ("I8", "I32", "I64": quantized
  // checkpoints); empty: DTypeName(dtype).
  std::string stored_dtype = {};
};
// Bytes of the tensor `spec` describes (element size of its stored dtype × elements).
uint64_t TensorSpecBytes(const TensorSpec& spec);
Status WriteSafetensorsStreaming(const std::string& path, const std::vector<TensorSpec>& specs,
                                 const std::function<Status(size_t, void*)>& fill,
                                 const std::map<std::string, std::string>& metadata = {});

// Writes a safetensors file (header padded to 8 bytes, tensors in the given order).
Status WriteSafetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                        const std::map<std::string, std::string>& metadata = {});

}  // namespace loom
