// Opening untrusted paths safely: only regular files are read (never a FIFO, device or folder,
// which would block or never end), sizes are capped, and no std::filesystem call throws.
//
//   ASSIGN_OR_RETURN(std::string text, ReadFileBounded(path, kMaxConfigFileBytes, "config.json"));
//   ASSIGN_OR_RETURN(bool has_gen, RegularFileExists(dir + "/generation_config.json"));
//
// Errors name the file: "config.json /m/config.json: is a FIFO, not a regular file".
// Thread-safety: every function is reentrant.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "base/status.h"

namespace loom {

// Size caps of the small files loom reads whole.
inline constexpr uint64_t kMaxConfigFileBytes = uint64_t{16} << 20;   // *config.json, index
inline constexpr uint64_t kMaxRequestFileBytes = uint64_t{256} << 20;  // --batch, --chat, --file

// Reads the whole file at `path` when it is a regular file (symlinks are followed) of at most
// `max_bytes`. `what` (may be empty) says what the file is for, e.g. "--batch"; it leads the
// message. Errors: kNotFound (missing), kInvalidArgument (a folder, FIFO, device, socket, a
// symlink loop, unreadable), kResourceExhausted (larger than max_bytes).
StatusOr<std::string> ReadFileBounded(const std::string& path, uint64_t max_bytes,
                                      std::string_view what = "");

// Opens `path` read-only without blocking (O_NONBLOCK: a FIFO does not wait for a writer) and
// returns the descriptor only when it is a regular file; *size gets its size. The caller
// closes the descriptor. Errors as ReadFileBounded's.
StatusOr<int> OpenRegularFile(const std::string& path, uint64_t* size, std::string_view what = "");

// While alive, OpenRegularFile (so ReadFileBounded and MappedFile too) on this thread opens a
// path only when it resolves inside the folder `root` (canonical), and opens it without a window
// between the check and the open: the resolved path is walked from a descriptor of `root` one
// component at a time with O_NOFOLLOW, so a folder or file on it swapped for a symbolic link
// after resolution (a TOCTOU race by someone who can write under `root`) fails the open instead
// of reading outside. Symbolic links that stay inside `root` still work. Scopes nest; the
// innermost one applies. For folders whose writers are not trusted (a --lora-dir).
class ConfinedOpenScope {
 public:
  explicit ConfinedOpenScope(std::string root);
  ~ConfinedOpenScope();
  ConfinedOpenScope(const ConfinedOpenScope&) = delete;
  ConfinedOpenScope& operator=(const ConfinedOpenScope&) = delete;
  const std::string& root() const { return root_; }

 private:
  ConfinedOpenScope* outer_;
  std::string root_;
};

// For optional files: false when nothing is at `path`; true when it is a regular file (after
// symlinks); an error when something else is there (a folder, FIFO, loop, no permission).
// Under a ConfinedOpenScope, kInvalidArgument ("resolves outside ROOT") when `path` or a
// symbolic link on it leads out of the root, whether or not anything is there (IsDirectory too).
StatusOr<bool> RegularFileExists(const std::string& path, std::string_view what = "");

// Whether `path` is a folder (after symlinks): false when absent or something else; an error only
// when it cannot be told (a symlink loop, no permission).
StatusOr<bool> IsDirectory(const std::string& path, std::string_view what = "");

// "a FIFO", "a folder", "a character device", ... for the file type of st_mode.
const char* FileTypeName(unsigned int st_mode);

}  // namespace loom
