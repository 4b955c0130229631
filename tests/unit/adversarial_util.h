// Helpers of the adversarial tests: temp folders, copies of fixtures, byte edits, a snapshot of
// a folder tree (to assert that nothing on disk changed) and running the loom binary.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include "base/status.h"

namespace loom::testing {

namespace fs = std::filesystem;

inline const std::string kFixtures = LOOM_FIXTURES;

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "loom_adversarial_XXXXXX").string();
    char* p = mkdtemp(tmpl.data());
    EXPECT_NE(p, nullptr) << "mkdtemp failed for " << tmpl;
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string Path(const std::string& name) const { return (fs::path(path_) / name).string(); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

inline void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

inline std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Copies a fixture folder (regular files only) to `dst`, which is created.
inline void CopyDir(const std::string& src, const std::string& dst) {
  fs::create_directories(dst);
  for (const auto& e : fs::directory_iterator(src)) {
    if (e.is_regular_file()) fs::copy_file(e.path(), fs::path(dst) / e.path().filename());
  }
}

// Every entry under `root` (symlinks not followed): relative path → type, bytes or link target.
inline std::map<std::string, std::string> Snapshot(const std::string& root) {
  std::map<std::string, std::string> out;
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(root, ec))) return out;
  out["."] = fs::is_symlink(fs::symlink_status(root, ec)) ? "link:" + fs::read_symlink(root, ec).string()
                                                          : "dir";
  if (fs::is_symlink(fs::symlink_status(root, ec))) return out;
  for (auto it = fs::recursive_directory_iterator(root, ec); it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    const std::string rel = fs::relative(it->path(), root, ec).string();
    const fs::file_status st = fs::symlink_status(it->path(), ec);
    if (fs::is_symlink(st)) {
      out[rel] = "link:" + fs::read_symlink(it->path(), ec).string();
    } else if (fs::is_directory(st)) {
      out[rel] = "dir";
    } else if (fs::is_regular_file(st)) {
      out[rel] = "file:" + ReadBytes(it->path().string());
    } else {
      out[rel] = "other";
    }
  }
  return out;
}

inline bool Contains(const std::string& s, const std::string& needle) {
  return s.find(needle) != std::string::npos;
}

// Asserts a failed Status with `code` whose message holds every needle.
#define EXPECT_STATUS(st, status_code, ...)                                              \
  do {                                                                                  \
    const ::loom::Status _s = (st);                                                     \
    EXPECT_EQ(_s.code(), status_code) << _s.ToString();                                 \
    for (const std::string& _n : std::initializer_list<std::string>{__VA_ARGS__}) {     \
      EXPECT_TRUE(::loom::testing::Contains(_s.message(), _n))                          \
          << "'" << _n << "' not in: " << _s.message();                                 \
    }                                                                                   \
  } while (0)

struct RunResult {
  int exit_code = -1;  // -signal when killed by a signal
  std::string output;  // stdout and stderr together
};

// Runs `loom ARGS` (the binary built beside the tests) with a timeout, capturing its output.
inline RunResult RunLoom(const std::string& args, int timeout_s = 60) {
  const std::string cmd = "timeout -s KILL " + std::to_string(timeout_s) + " " + LOOM_BINARY + " " +
                          args + " 2>&1";
  RunResult r;
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return r;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.output.append(buf.data(), n);
  const int status = pclose(p);
  if (WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) r.exit_code = -WTERMSIG(status);
  return r;
}

}  // namespace loom::testing
