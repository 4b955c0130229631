// MappedFile: mmap(2) wrapper over regular files only; empty files map to a null, zero-length view.
#include "base/mmap_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>
#include <new>

#include "base/file.h"

namespace loom {

namespace {
// The live file mappings, [begin, end): ReleaseMappedPages acts inside them only. madvise
// DONTNEED on anonymous memory (a tensor copied out of its file, e.g. one stored misaligned)
// would not release it but zero it, and a later merge or DoRA norm would read zeros.
// Never destroyed: a MappedFile held by a static may outlive any static here.
std::mutex& MappingsMutex() {
  static auto* mu = new std::mutex;
  return *mu;
}
std::map<uintptr_t, uintptr_t>& Mappings() {
  static auto* m = new std::map<uintptr_t, uintptr_t>;
  return *m;
}
}  // namespace

StatusOr<std::shared_ptr<MappedFile>> MappedFile::Open(const std::string& path) {
  return Load(path, /*in_memory=*/false);
}

StatusOr<std::shared_ptr<MappedFile>> MappedFile::ReadIntoMemory(const std::string& path) {
  return Load(path, /*in_memory=*/true);
}

StatusOr<std::shared_ptr<MappedFile>> MappedFile::Load(const std::string& path, bool in_memory) {
  // Regular files only: a FIFO or device would block open() or mmap, or never end.
  uint64_t size = 0;
  ASSIGN_OR_RETURN(const int fd, OpenRegularFile(path, &size));
  std::shared_ptr<MappedFile> file(new (std::nothrow) MappedFile());
  if (!file) {
    ::close(fd);
    return ResourceExhausted(path + ": out of memory");
  }
  file->path_ = path;
  file->size_ = static_cast<size_t>(size);
  Status st = file->size_ == 0 ? OkStatus() : in_memory ? file->ReadFrom(fd) : file->MapFrom(fd);
  ::close(fd);
  if (!st.ok()) return st;
  return file;
}

Status MappedFile::MapFrom(int fd) {
  void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
  if (p == MAP_FAILED) return InvalidArgument(path_ + ": mmap failed: " + std::strerror(errno));
  data_ = static_cast<const uint8_t*>(p);
  std::lock_guard<std::mutex> lock(MappingsMutex());
  const auto begin = reinterpret_cast<uintptr_t>(p);
  Mappings()[begin] = begin + size_;
  return OkStatus();
}

Status MappedFile::ReadFrom(int fd) {
  void* p = ::mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return ResourceExhausted(path_ + ": cannot allocate " + std::to_string(size_) + " bytes");
  data_ = static_cast<const uint8_t*>(p);  // unmapped by the destructor from here on
  for (size_t done = 0; done < size_;) {
    const ssize_t n = ::read(fd, static_cast<uint8_t*>(p) + done, size_ - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Unavailable(path_ + ": read failed: " + std::strerror(errno));  // I/O
    if (n == 0) return InvalidArgument(path_ + ": the file shrank while it was read");
    done += static_cast<size_t>(n);
  }
  ::mprotect(p, size_, PROT_READ);
  return OkStatus();
}

MappedFile::~MappedFile() {
  if (data_ == nullptr) return;
  {
    std::lock_guard<std::mutex> lock(MappingsMutex());
    Mappings().erase(reinterpret_cast<uintptr_t>(data_));
  }
  ::munmap(const_cast<uint8_t*>(data_), size_);
}

StatusOr<std::string> ReadTextFile(const std::string& path) {
  return ReadFileBounded(path, kMaxRequestFileBytes);
}

void ReleaseMappedPages(const void* data, size_t size) {
  const long page = ::sysconf(_SC_PAGESIZE);
  if (page <= 0 || data == nullptr) return;
  const auto begin = reinterpret_cast<uintptr_t>(data);
  {
    std::lock_guard<std::mutex> lock(MappingsMutex());
    auto it = Mappings().upper_bound(begin);  // the first mapping starting after `data`
    if (it == Mappings().begin()) return;
    --it;
    if (begin + size > it->second || begin + size < begin) return;  // not inside one file's mapping
  }
  const uintptr_t first = (begin + static_cast<uintptr_t>(page) - 1) / static_cast<uintptr_t>(page) * static_cast<uintptr_t>(page);
  const uintptr_t last = (begin + size) / static_cast<uintptr_t>(page) * static_cast<uintptr_t>(page);
  if (last > first) ::madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED);
}

}  // namespace loom
