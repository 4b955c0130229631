// CheckOutputFile / ReplaceFileAtomically: an output flag never names an input; writes are whole.
#include "base/output_file.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

namespace loom {

namespace fs = std::filesystem;

namespace {

// Linux's terminal majors (Documentation/admin-guide/devices.txt): 4 (tty0-63, ttyS), 5
// (/dev/tty, /dev/console, /dev/ptmx), 136-143 (/dev/pts/*), 166 (ttyACM), 188 (ttyUSB), 204
// (low-density serial: ttyAMA, ...), 229 (hvc). Decided from the number: opening an unknown
// device to ask isatty(3) can itself act (/dev/watchdog starts its timer).
bool IsTerminalDevice(dev_t rdev) {
  const unsigned int m = major(rdev);
  return m == 4 || m == 5 || (m >= 136 && m <= 143) || m == 166 || m == 188 || m == 204 ||
         m == 229;
}

bool SameInode(const fs::path& a, const struct stat& b) {
  struct stat st {};
  return ::stat(a.c_str(), &st) == 0 && st.st_dev == b.st_dev && st.st_ino == b.st_ino;
}

// `path` or a folder above it is `input` (by inode: bind mounts, hard-linked files).
bool IsOrIsUnder(const fs::path& path, const struct stat& input) {
  for (fs::path p = path;; p = p.parent_path()) {
    if (SameInode(p, input)) return true;
    if (p == p.parent_path() || p.empty()) return false;
  }
}

// The file in `folder` (its entries and 4 levels of folders below, links followed) that is
// `out` by inode, or "":
// a model folder's files are often links to elsewhere (a hub cache snapshot's to ../../blobs/,
// make_serve_model.py's to the model it serves), and the output replacing such a target
// replaces the model's weights. More than 100,000 entries, or a listing that fails part-way,
// is *unchecked (the caller refuses rather than guess).
std::string FolderEntryThatIs(const fs::path& folder, const struct stat& out, bool* unchecked) {
  std::error_code ec;
  fs::recursive_directory_iterator it(folder, fs::directory_options::skip_permission_denied, ec);
  size_t seen = 0;
  for (; !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (++seen > 100000) {
      *unchecked = true;
      return "";
    }
    if (it.depth() >= 4) it.disable_recursion_pending();
    if (SameInode(it->path(), out)) return it->path().string();
  }
  if (ec) *unchecked = true;
  return "";
}

}  // namespace

StatusOr<std::string> CheckOutputFile(const std::string& path, const std::string& flag,
                                      const std::vector<std::pair<std::string, std::string>>& inputs) {
  if (path.empty()) return InvalidArgument(flag + ": empty path");
  std::error_code ec;
  const fs::file_status st = fs::symlink_status(path, ec);
  if (ec && ec != std::errc::no_such_file_or_directory) {
    return InvalidArgument(flag + " " + path + ": " + ec.message());
  }
  const bool exists = !ec && fs::exists(st);
  ec.clear();
  // A terminal, pipe or /dev/null (also through a link: /dev/stdout) is written as a stream:
  // nothing of loom's inputs is there to overwrite.
  const fs::file_status target = fs::status(path, ec);
  ec.clear();
  if (exists && fs::is_fifo(target)) return path;
  if (exists && fs::is_character_file(target)) {
    // Only what the flag's help promises: a terminal or /dev/null (any device was written:
    // /dev/kmsg, or /dev/mem as root).
    struct stat dev {}, null_dev {};
    const bool ok = ::stat(path.c_str(), &dev) == 0 &&
                    ((::stat("/dev/null", &null_dev) == 0 && dev.st_rdev == null_dev.st_rdev) ||
                     IsTerminalDevice(dev.st_rdev));
    if (ok) return path;
    return InvalidArgument(flag + " " + path +
                           " is a device other than a terminal or /dev/null; name a file");
  }
  if (exists && fs::is_symlink(st)) {
    return InvalidArgument(flag + " " + path + " is a symbolic link; name the file itself");
  }
  if (exists && !fs::is_regular_file(st)) {
    return InvalidArgument(flag + " " + path + " exists and is not a regular file");
  }
  fs::path real = fs::weakly_canonical(fs::absolute(path, ec), ec);
  if (ec) return InvalidArgument(flag + " " + path + ": cannot resolve: " + ec.message());
  if (real.filename().empty()) return InvalidArgument(flag + " " + path + ": names a folder, not a file");
  struct stat parent {};
  if (::stat(real.parent_path().c_str(), &parent) != 0 || !S_ISDIR(parent.st_mode)) {
    return InvalidArgument(flag + " " + path + ": its folder " + real.parent_path().string() +
                           " does not exist");
  }
  for (const auto& [in_flag, input] : inputs) {
    if (input.empty()) continue;
    struct stat in {};
    if (::stat(input.c_str(), &in) != 0) continue;  // the input's own check reports it
    const fs::path in_real = fs::weakly_canonical(fs::absolute(input, ec), ec);
    ec.clear();
    const bool clash = (exists && SameInode(real, in)) || IsOrIsUnder(real.parent_path(), in) ||
                       real == in_real;
    if (clash) {
      return InvalidArgument(flag + " " + path + " is " +
                             (S_ISDIR(in.st_mode) ? "inside " : "") + in_flag + " " + input +
                             "; loom never writes into its inputs");
    }
    struct stat out {};
    if (exists && S_ISDIR(in.st_mode) && ::stat(real.c_str(), &out) == 0) {
      bool unchecked = false;
      const std::string entry = FolderEntryThatIs(in_real, out, &unchecked);
      if (unchecked) {
        return InvalidArgument(flag + " " + path + ": cannot list all of " + in_flag + " " + input +
                               " (more than 100,000 files, or a listing error) to check that " +
                               path + " is none of them");
      }
      if (!entry.empty()) {
        return InvalidArgument(flag + " " + path + " is " + entry + " of " + in_flag + " " + input +
                               " (through a link); loom never writes into its inputs");
      }
    }
  }
  return real.string();
}

namespace {
// All of `bytes` to `fd`; errno of the failure, or 0.
int WriteAll(int fd, const std::string& bytes) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno;
    if (n == 0) return EIO;
    done += static_cast<size_t>(n);
  }
  return 0;
}
}  // namespace

mode_t UmaskedMode(mode_t requested) {
  // Read without changing it (umask(2) can only set it): /proc/self/status's "Umask:" line
  // (Linux 4.7+); else set and restore, as the CLI runs this before starting its own threads
  // that create files.
  mode_t mask = 022;
  bool known = false;
  if (FILE* f = std::fopen("/proc/self/status", "re")) {
    char line[256];
    unsigned int value = 0;
    while (std::fgets(line, sizeof(line), f) != nullptr) {
      if (std::sscanf(line, "Umask: %o", &value) == 1) {
        mask = static_cast<mode_t>(value);
        known = true;
        break;
      }
    }
    std::fclose(f);
  }
  if (!known) {
    mask = ::umask(022);
    ::umask(mask);
  }
  return requested & ~mask & 07777;
}

Status ReplaceFileAtomically(const std::string& path, const std::string& bytes, const std::string& flag) {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && (S_ISCHR(st.st_mode) || S_ISFIFO(st.st_mode))) {
    // A FIFO with no reader: an error now (a blocking open waited for one forever).
    const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0 && errno == ENXIO && S_ISFIFO(st.st_mode)) {
      return Internal(flag + " " + path + ": a pipe that no process is reading");
    }
    if (fd < 0) return Internal(flag + " " + path + ": cannot open: " + std::strerror(errno));
    ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);  // blocking writes from here
    int err = WriteAll(fd, bytes);
    if (::close(fd) != 0 && err == 0) err = errno;
    if (err != 0) return Internal(flag + " " + path + ": write failed: " + std::strerror(err));
    return OkStatus();
  }
  const fs::path real(path);
  std::string name = ".";
  name.append(real.filename().string()).append(".loom-XXXXXX");
  std::string tmpl = (real.parent_path() / name).string();
  const int fd = ::mkstemp(tmpl.data());
  if (fd < 0) return Internal(flag + " " + path + ": cannot create a file beside it: " + std::strerror(errno));
  // mkstemp makes 0600: the mode of the file replaced, else what creating it would give.
  struct stat old {};
  const bool replacing = ::stat(real.c_str(), &old) == 0 && S_ISREG(old.st_mode);
  ::fchmod(fd, replacing ? (old.st_mode & 0777) : UmaskedMode(0666));  // never setuid/setgid
  int err = WriteAll(fd, bytes);
  if (err == 0 && ::fsync(fd) != 0) err = errno;
  if (::close(fd) != 0 && err == 0) err = errno;
  if (err == 0 && ::rename(tmpl.c_str(), real.c_str()) != 0) err = errno;
  if (err != 0) {
    ::unlink(tmpl.c_str());
    return Internal(flag + " " + path + ": write failed: " + std::strerror(err));
  }
  return OkStatus();
}

}  // namespace loom
