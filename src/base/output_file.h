// Output files named by a flag (e.g. perplexity --per-token): never one of the command's inputs,
// written whole or not at all (a temporary file beside it, renamed over it at the end).
//
//   ASSIGN_OR_RETURN(std::string out, CheckOutputFile(path, "--per-token",
//                                                     {{"--model", model_dir}, {"--text", text}}));
//   ... the work ...
//   RETURN_IF_ERROR(ReplaceFileAtomically(out, bytes, "--per-token"));
#pragma once

#include <sys/types.h>

#include <string>
#include <utility>
#include <vector>

#include "base/status.h"

namespace loom {

// Checked before any work: `path` (resolved: symlinks, "." and "..") must not be, by path or by
// inode, an input file nor lie inside an input folder, nor (when it exists) be the file a link
// in an input folder leads to (a hub cache snapshot's model.safetensors →
// ../../blobs/<sha>); `inputs` are (flag, path) pairs, an
// empty path skipped. `path` itself must not be a symbolic link, a folder or a special file (an
// existing regular file is replaced, as `-o` does), except a terminal, pipe or /dev/null (also
// through a link, /dev/stdout), which is returned as given and written as a stream. Returns the
// path to write.
StatusOr<std::string> CheckOutputFile(const std::string& path, const std::string& flag,
                                      const std::vector<std::pair<std::string, std::string>>& inputs);

// The mode a new file or folder gets from open(2)/mkdir(2) with `requested` (0666 for files, 0777
// for folders): `requested` less the process's umask. For what loom makes with mkstemp/mkdtemp
// (always 0600/0700) before renaming it into place: a fixed 0644/0755 ignored the user's umask.
mode_t UmaskedMode(mode_t requested);

// Writes `bytes` to a new file beside `path` and renames it over `path` (after fsync): a reader
// sees the old file or the whole new one, and a failure leaves `path` as it was. The new file
// keeps the mode of the file it replaces (a private 0600 file stays private), else gets
// UmaskedMode(0666). A terminal,
// pipe or /dev/null is written directly.
Status ReplaceFileAtomically(const std::string& path, const std::string& bytes, const std::string& flag);

}  // namespace loom
