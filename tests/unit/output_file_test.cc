// CheckOutputFile / ReplaceFileAtomically: an output flag can name no input, by any spelling.
#include "base/output_file.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace loom {
namespace {

namespace fs = std::filesystem;

class OutputFile : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "loom_out_XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    root_ = tmpl;
    fs::create_directories(root_ / "model" / "sub");
    Write(root_ / "model" / "model.safetensors", "weights");
    Write(root_ / "text.txt", "text");
  }
  void TearDown() override { fs::remove_all(root_); }
  static void Write(const fs::path& p, const std::string& s) { std::ofstream(p) << s; }
  static std::string Read(const fs::path& p) {
    std::stringstream ss;
    ss << std::ifstream(p).rdbuf();
    return ss.str();
  }
  StatusOr<std::string> Check(const fs::path& out) {
    return CheckOutputFile(out.string(), "--out-file",
                           {{"--model", (root_ / "model").string()}, {"--text", (root_ / "text.txt").string()},
                            {"--lora", ""}});
  }
  fs::path root_;
};

TEST_F(OutputFile, AnInputByAnySpellingIsRefused) {
  fs::create_symlink(root_ / "model", root_ / "model_link");
  fs::create_hard_link(root_ / "text.txt", root_ / "hard.txt");
  fs::create_symlink(root_ / "text.txt", root_ / "sym.txt");
  const std::pair<fs::path, std::string> cases[] = {
      {root_ / "model" / "model.safetensors", "is inside --model"},
      {root_ / "model" / "new.json", "is inside --model"},
      {root_ / "model" / "sub" / ".." / "x.json", "is inside --model"},
      {root_ / "model_link" / "x.json", "is inside --model"},
      {root_ / "text.txt", "is --text"},
      {root_ / "hard.txt", "is --text"},
      {root_ / "sym.txt", "is a symbolic link"},
      {root_ / "model", "is not a regular file"},
      {root_ / "missing" / "x.json", "does not exist"},
  };
  for (const auto& [path, fragment] : cases) {
    auto r = Check(path);
    ASSERT_FALSE(r.ok()) << path;
    EXPECT_NE(r.status().message().find(fragment), std::string::npos) << r.status().message();
  }
  EXPECT_EQ(Read(root_ / "text.txt"), "text");
  EXPECT_EQ(Read(root_ / "model" / "model.safetensors"), "weights");
}

TEST_F(OutputFile, TheTargetOfALinkInAnInputFolderIsRefused) {
  // A hub cache snapshot: the model folder's files are links to blobs elsewhere. Writing the
  // output over a blob replaced the model's weights (helper 88's finding).
  fs::create_directories(root_ / "blobs");
  Write(root_ / "blobs" / "abc123", "real weights");
  fs::create_directories(root_ / "model" / "sub");
  fs::create_symlink(root_ / "blobs" / "abc123", root_ / "model" / "sub" / "shard.safetensors");
  Write(root_ / "blobs" / "unrelated", "x");
  auto r = Check(root_ / "blobs" / "abc123");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("shard.safetensors of --model"), std::string::npos)
      << r.status().message();
  EXPECT_EQ(Read(root_ / "blobs" / "abc123"), "real weights");
  EXPECT_TRUE(Check(root_ / "blobs" / "unrelated").ok());  // a file no input leads to
}

TEST_F(OutputFile, ANewOrExistingFileElsewhereIsReplacedWhole) {
  for (const fs::path& p : {root_ / "new.json", root_ / "old.json"}) {
    if (p.filename() == "old.json") Write(p, "a much longer old content than the new one");
    auto r = Check(p);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    ASSERT_TRUE(ReplaceFileAtomically(*r, "[1,2]\n", "--out-file").ok());
    EXPECT_EQ(Read(p), "[1,2]\n");
  }
  for (const auto& e : fs::directory_iterator(root_)) {
    EXPECT_EQ(e.path().filename().string().find(".loom-"), std::string::npos) << e.path();
  }
}

TEST_F(OutputFile, AStreamIsWrittenDirectly) {
  // /dev/null, and a link to it as /dev/stdout is to a terminal or pipe (the test's own stdout
  // may be a regular file: that link is refused like any other).
  fs::create_symlink("/dev/null", root_ / "null_link");
  for (const std::string& dev : {std::string("/dev/null"), (root_ / "null_link").string()}) {
    auto r = Check(dev);
    ASSERT_TRUE(r.ok()) << dev << ": " << r.status().ToString();
    EXPECT_EQ(*r, dev);
  }
  ASSERT_TRUE(ReplaceFileAtomically("/dev/null", "[1]\n", "--out-file").ok());
}

// Only a terminal or /dev/null among devices (any character device was written: /dev/kmsg,
// /dev/mem as root); a pipe nobody reads is an error at the write, not a wait forever.
TEST_F(OutputFile, OtherDevicesAreRefusedAndAPipeWithoutReaderFails) {
  for (const char* dev : {"/dev/zero", "/dev/urandom", "/dev/full"}) {
    if (!fs::exists(dev)) continue;
    auto r = Check(dev);
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << dev;
    EXPECT_NE(r.status().message().find("terminal or /dev/null"), std::string::npos)
        << r.status().message();
  }
  const fs::path fifo = root_ / "out.fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  auto r = Check(fifo);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  Status st = ReplaceFileAtomically(*r, "[1]\n", "--out-file");
  EXPECT_EQ(st.code(), StatusCode::kInternal) << st.ToString();
  EXPECT_NE(st.message().find("no process is reading"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace loom
