// Regular-file-only opening and bounded reads (open with O_NONBLOCK, fstat, then read).
#include "base/file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <new>

namespace loom {

namespace {

std::string Where(const std::string& path, std::string_view what) {
  return what.empty() ? path : std::string(what) + " " + path;
}

Status ErrnoStatus(const std::string& path, std::string_view what, int err) {
  const std::string at = Where(path, what);
  switch (err) {
    case ENOENT: return NotFound(at + ": no such file");
    case ENOTDIR: return NotFound(at + ": a part of the path is not a folder");
    case ELOOP: return InvalidArgument(at + ": too many levels of symbolic links (a symlink loop?)");
    case EACCES:
    case EPERM: return InvalidArgument(at + ": permission denied");
    case ENAMETOOLONG: return InvalidArgument(at + ": path too long");
    // The machine's trouble, not the file's (out of descriptors or memory, an I/O error, a
    // stale NFS handle): kUnavailable, so no caller keeps it as the file's verdict (503).
    case EMFILE:
    case ENFILE:
    case ENOMEM:
    case EIO:
    case EAGAIN:
    case EINTR:
    case EBUSY:
    case ETXTBSY:
    case ESTALE: return Unavailable(at + ": cannot open: " + std::strerror(err));
    default: return InvalidArgument(at + ": cannot open: " + std::strerror(err));
  }
}

thread_local ConfinedOpenScope* t_confined = nullptr;

// `path` relative to `root` when it is `root` itself or inside it (both canonical, absolute).
bool RelativeInside(const std::string& path, const std::string& root, std::string* rel) {
  if (path.compare(0, root.size(), root) != 0) return false;
  if (path.size() == root.size()) {
    rel->clear();
    return true;
  }
  if (root != "/" && path[root.size()] != '/') return false;  // /a/bc is not inside /a/b
  *rel = path.substr(root == "/" ? 1 : root.size() + 1);
  return true;
}

// `path` resolved, and its part below `root` (non-empty); an error when it resolves elsewhere.
// The message does not quote where: a client must not learn the machine's paths outside.
Status ResolveInside(const std::string& path, const std::string& root, std::string_view what,
                     std::string* canonical, std::string* rel) {
  char* resolved = ::realpath(path.c_str(), nullptr);
  if (resolved == nullptr) return ErrnoStatus(path, what, errno);
  *canonical = resolved;
  std::free(resolved);
  if (!RelativeInside(*canonical, root, rel)) {
    return InvalidArgument(Where(path, what) + ": resolves outside " + root);
  }
  if (rel->empty()) return InvalidArgument(Where(path, what) + ": is the root " + root + " itself");
  return OkStatus();
}

// Opens `path` (which must resolve inside `root`) by walking its canonical form from a
// descriptor of `root` with O_NOFOLLOW at each step; see ConfinedOpenScope.
StatusOr<int> OpenConfined(const std::string& path, const std::string& root, std::string_view what,
                           int flags) {
  std::string canonical, rel;
  RETURN_IF_ERROR(ResolveInside(path, root, what, &canonical, &rel));
  int dir = ::open(root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir < 0) return ErrnoStatus(root, what, errno);
  size_t start = 0;
  while (true) {
    const size_t slash = rel.find('/', start);
    const bool last = slash == std::string::npos;
    const std::string part = rel.substr(start, last ? std::string::npos : slash - start);
    const int next = ::openat(dir, part.c_str(),
                              last ? flags | O_NOFOLLOW
                                   : O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    const int err = errno;
    ::close(dir);
    if (next < 0) {
      if (err == ELOOP || err == ENOTDIR || err == ENOENT) {
        return InvalidArgument(Where(path, what) + ": changed while it was opened (" + canonical +
                               " is no longer a path without symbolic links inside " + root + ")");
      }
      return ErrnoStatus(path, what, err);
    }
    if (last) return next;
    dir = next;
    start = slash + 1;
  }
}

// Whether `path` leads out of `root` (*out): it, or a symbolic link on the way, resolves outside,
// whether or not something exists there; a missing path inside a folder inside the root does
// not. `hops`: symbolic links followed so far. An error when it cannot be told (no permission, a
// loop); what a dangling link points at is never told (any error there counts as out).
Status LeadsOutside(const std::string& path, const std::string& root, std::string_view what,
                    bool* out, int hops) {
  *out = false;
  if (hops > 40) return ErrnoStatus(path, what, ELOOP);
  if (char* resolved = ::realpath(path.c_str(), nullptr)) {
    const std::string canonical = resolved;
    std::free(resolved);
    std::string rel;
    *out = !RelativeInside(canonical, root, &rel);
    return OkStatus();
  }
  const int err = errno;
  if (err != ENOENT && err != ENOTDIR) return ErrnoStatus(path, what, err);
  const size_t slash = path.find_last_of('/');
  const std::string parent = slash == std::string::npos ? "."
                             : slash == 0               ? "/"
                                                        : path.substr(0, slash);
  struct stat lst {};
  if (::lstat(path.c_str(), &lst) == 0 && S_ISLNK(lst.st_mode)) {
    // A link to nothing: where it points decides (relative to the folder it is in).
    std::string target(4096, '\0');
    const ssize_t n = ::readlink(path.c_str(), target.data(), target.size());
    if (n < 0 || static_cast<size_t>(n) >= target.size()) {
      *out = true;
      return OkStatus();
    }
    target.resize(static_cast<size_t>(n));
    if (target.empty() || target[0] != '/') target = parent + "/" + target;
    if (!LeadsOutside(target, root, what, out, hops + 1).ok()) *out = true;
    return OkStatus();
  }
  if (parent == path) return OkStatus();               // "/" or ".": nothing above it to ask
  return LeadsOutside(parent, root, what, out, hops);  // nothing at `path`: its folder decides
}

// Under a ConfinedOpenScope: the error OpenRegularFile gives for a path that leads out of the
// root, for one that does whether or not something is there (a different answer for a link to
// an existing file outside than for one to a missing path told which files the machine has).
Status CheckConfined(const std::string& path, std::string_view what) {
  if (t_confined == nullptr) return OkStatus();
  bool out = false;
  RETURN_IF_ERROR(LeadsOutside(path, t_confined->root(), what, &out, 0));
  if (out) return InvalidArgument(Where(path, what) + ": resolves outside " + t_confined->root());
  return OkStatus();
}

}  // namespace

ConfinedOpenScope::ConfinedOpenScope(std::string root) : outer_(t_confined), root_(std::move(root)) {
  t_confined = this;
}
ConfinedOpenScope::~ConfinedOpenScope() { t_confined = outer_; }

const char* FileTypeName(unsigned int st_mode) {
  if (S_ISREG(st_mode)) return "a regular file";
  if (S_ISDIR(st_mode)) return "a folder";
  if (S_ISFIFO(st_mode)) return "a FIFO";
  if (S_ISCHR(st_mode)) return "a character device";
  if (S_ISBLK(st_mode)) return "a block device";
  if (S_ISSOCK(st_mode)) return "a socket";
  if (S_ISLNK(st_mode)) return "a symbolic link";
  return "not a regular file";
}

StatusOr<int> OpenRegularFile(const std::string& path, uint64_t* size, std::string_view what) {
  // Confined: a path that resolves outside the root is refused before anything else is asked
  // about it (the stat below said what kind of file it was).
  if (t_confined != nullptr) {
    std::string canonical, rel;
    RETURN_IF_ERROR(ResolveInside(path, t_confined->root(), what, &canonical, &rel));
  }
  // Refuse before opening too: open() on a device can have side effects (tapes, ttys).
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return ErrnoStatus(path, what, errno);
  if (!S_ISREG(st.st_mode)) {
    return InvalidArgument(Where(path, what) + ": is " + FileTypeName(st.st_mode) +
                           ", not a regular file");
  }
  // O_NONBLOCK: if the path was swapped for a FIFO since stat, open still returns at once.
  const int flags = O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY;
  int fd = -1;
  if (t_confined != nullptr) {
    ASSIGN_OR_RETURN(fd, OpenConfined(path, t_confined->root(), what, flags));
  } else {
    fd = ::open(path.c_str(), flags);
    if (fd < 0) return ErrnoStatus(path, what, errno);
  }
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return InvalidArgument(Where(path, what) + ": is " + FileTypeName(st.st_mode) +
                           ", not a regular file");
  }
  // Regular files ignore O_NONBLOCK for reads; clear it anyway so later reads are plain.
  const int fl = ::fcntl(fd, F_GETFL);
  if (fl >= 0) ::fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
  *size = static_cast<uint64_t>(st.st_size);
  return fd;
}

StatusOr<std::string> ReadFileBounded(const std::string& path, uint64_t max_bytes,
                                      std::string_view what) {
  uint64_t size = 0;
  ASSIGN_OR_RETURN(const int fd, OpenRegularFile(path, &size, what));
  if (size > max_bytes) {
    ::close(fd);
    return ResourceExhausted(Where(path, what) + ": file is " + std::to_string(size) +
                             " bytes, above the limit of " + std::to_string(max_bytes));
  }
  std::string text;
  try {
    text.resize(static_cast<size_t>(size));
  } catch (const std::exception&) {
    ::close(fd);
    return ResourceExhausted(Where(path, what) + ": out of memory reading " +
                             std::to_string(size) + " bytes");
  }
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::read(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      return Unavailable(Where(path, what) + ": read failed: " + std::strerror(err));  // I/O
    }
    if (n == 0) break;  // the file shrank while reading
    done += static_cast<size_t>(n);
  }
  text.resize(done);
  // A file that grew past the cap while reading is refused, not cut.
  char extra = 0;
  ssize_t more;
  do {
    more = ::read(fd, &extra, 1);
  } while (more < 0 && errno == EINTR);
  ::close(fd);
  if (more > 0 && done + 1 > max_bytes) {
    return ResourceExhausted(Where(path, what) + ": file grew above the limit of " +
                             std::to_string(max_bytes) + " bytes while being read");
  }
  if (more > 0) {
    return Unavailable(Where(path, what) + ": file changed while being read; try again");
  }
  return text;
}

StatusOr<bool> RegularFileExists(const std::string& path, std::string_view what) {
  RETURN_IF_ERROR(CheckConfined(path, what));  // as OpenRegularFile: nothing told about outside
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) {
      // A dangling symlink is absent too, but a symlink loop is an error.
      struct stat lst {};
      if (::lstat(path.c_str(), &lst) == 0 && S_ISLNK(lst.st_mode)) {
        return InvalidArgument(Where(path, what) + ": is a symbolic link to nothing");
      }
      return false;
    }
    return ErrnoStatus(path, what, errno);
  }
  if (!S_ISREG(st.st_mode)) {
    return InvalidArgument(Where(path, what) + ": is " + FileTypeName(st.st_mode) +
                           ", not a regular file");
  }
  return true;
}

StatusOr<bool> IsDirectory(const std::string& path, std::string_view what) {
  RETURN_IF_ERROR(CheckConfined(path, what));  // as OpenRegularFile: nothing told about outside
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT || errno == ENOTDIR) return false;
    return ErrnoStatus(path, what, errno);
  }
  return S_ISDIR(st.st_mode);
}

}  // namespace loom
