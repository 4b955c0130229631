// FailedLoads: adapter folders that failed validation, remembered until one of their files changes.
#pragma once

#include <cstddef>
#include <mutex>
#include <string>
#include <unordered_map>

#include "base/status.h"

namespace loom {

// What an adapter folder's load reads, as stat(2) sees it: the folder and each file LoadAdapter
// opens or looks for (device, inode, size, modification and change times, or absence). Two equal
// fingerprints mean no file was replaced, written or touched between them. Empty (no
// fingerprint: nothing is kept) when one of them changed in the last 2 s (git's racy rule).
std::string AdapterFolderFingerprint(const std::string& dir);

// A broken adapter named again and again (a client retrying, or naming a --lora-dir sub-folder
// whose files are bad) was read and validated again on every request, under the store's
// one-load-at-a-time lock: a large adapter failing at its last tensor held every other adapter's
// load behind it each time. An invalid folder's error is kept here with the folder's fingerprint
// and answered again without reading anything while the fingerprint holds; any change to the
// folder's files (the adapter fixed or replaced) makes the next request load it again.
// Only kInvalidArgument is kept (the files' fault: file.cc and mmap_file.cc give the machine's
// trouble — descriptors, memory, I/O errors — as kUnavailable, and LoadAdapter a spent regex
// time budget as kResourceExhausted); a missing folder is tried again each time. Thread-safe.
class FailedLoads {
 public:
  explicit FailedLoads(size_t capacity = 1024) : capacity_(capacity) {}
  // The error kept for (name, dir) when the folder's fingerprint is still `fingerprint`.
  bool Find(const std::string& name, const std::string& dir, const std::string& fingerprint,
            Status* error) const;
  // Keeps `error` (when it is kInvalidArgument) for (name, dir) under `fingerprint`: the one
  // taken before the load, so a folder changed while it loaded is loaded again next time.
  void Remember(const std::string& name, const std::string& dir, const std::string& fingerprint,
                const Status& error);
  // Drops what is kept for (name, dir) (it loaded).
  void Forget(const std::string& name, const std::string& dir);
  size_t size() const;

 private:
  struct Failure {
    std::string fingerprint;
    Status error;
  };
  static std::string Key(const std::string& name, const std::string& dir) {
    return name + '\0' + dir;
  }
  const size_t capacity_;
  mutable std::mutex mu_;
  std::unordered_map<std::string, Failure> failures_;
};

}  // namespace loom
