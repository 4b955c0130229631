// Read-only memory-mapped file (RAII); the bytes of safetensors files are views into it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "base/status.h"

namespace loom {

// Thread-safety: immutable after Open; safe to read from any thread.
// Drops this process's pages of the whole pages inside [data, data + size) of a read-only file
// mapping (madvise DONTNEED): RSS falls, and a later read maps them again from the page cache.
// A range that is not inside one live MappedFile (heap memory: a tensor copied out of its file)
// is left alone, as DONTNEED would zero it.
void ReleaseMappedPages(const void* data, size_t size);

class MappedFile {
 public:
  static StatusOr<std::shared_ptr<MappedFile>> Open(const std::string& path);
  // The file's bytes read into private anonymous memory (read-only once filled): later changes
  // to the file — truncated (a mapping would SIGBUS), rewritten in place by `cp` — never reach
  // what was loaded. For files that may change while served (runtime adapters). Not a file
  // mapping for ReleaseMappedPages.
  static StatusOr<std::shared_ptr<MappedFile>> ReadIntoMemory(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  MappedFile() = default;
  // Open and ReadIntoMemory: the regular file at `path`, mapped or read (size_ > 0 for these two).
  static StatusOr<std::shared_ptr<MappedFile>> Load(const std::string& path, bool in_memory);
  Status MapFrom(int fd);
  Status ReadFrom(int fd);
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

// Whole regular file into a string, at most kMaxRequestFileBytes (base/file.h); prefer
// ReadFileBounded with the cap that fits the file.
StatusOr<std::string> ReadTextFile(const std::string& path);

}  // namespace loom
