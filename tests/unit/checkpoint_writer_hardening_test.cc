// The checkpoint writers (`loom merge`, `loom quantize`) under interruption, exceptions, umasks,
// special files in the model folder, and --out spellings that used to be found late or not at all.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <stdexcept>

#include "adversarial_util.h"
#include "base/interrupt.h"
#include "base/output_file.h"
#include "io/safetensors.h"
#include "lora/adapter.h"
#include "model/merged_checkpoint.h"
#include "model/model.h"

namespace loom {
namespace {

using namespace loom::testing;

bool LeftATemporaryFolder(const std::string& parent) {
  for (const auto& e : fs::directory_iterator(parent)) {
    if (Contains(e.path().filename().string(), ".loom-")) return true;
  }
  return false;
}

mode_t ModeOf(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(::stat(path.c_str(), &st), 0) << path;
  return st.st_mode & 07777;
}

// Restores the process's umask when the test ends.
struct ScopedUmask {
  explicit ScopedUmask(mode_t mask) : old(::umask(mask)) {}
  ~ScopedUmask() { ::umask(old); }
  mode_t old;
};

// A Ctrl-C while the checkpoint is written is noted, not fatal: the writer stops at its next
// tensor, the temporary folder is removed, and the error says so (the CLI then ends as the
// signal would: RaiseNotedSignal). Before, the gigabytes written so far were left behind.
TEST(CheckpointWriter, ASignalMidWriteRemovesTheTemporaryFolder) {
  TempDir dir;
  const std::string out = dir.Path("out");
  const std::vector<TensorSpec> specs = {{"a", DType::kF32, {4}}, {"b", DType::kF32, {4}}};
  int filled = 0;
  Status st = WriteCheckpointAtomically(out, out, "loom merge", [&](const std::string& tmp) {
    return WriteSafetensorsStreaming(tmp + "/model.safetensors", specs, [&](size_t, void* dst) {
      std::memset(dst, 0, 16);
      if (++filled == 1) ::raise(SIGINT);  // noted by the section: the process lives on
      return OkStatus();
    });
  });
  EXPECT_EQ(st.code(), StatusCode::kUnavailable) << st.ToString();
  EXPECT_TRUE(Contains(st.message(), "interrupted")) << st.message();
  EXPECT_EQ(filled, 1);  // stopped at the next tensor
  EXPECT_TRUE(Interrupted());
  EXPECT_FALSE(fs::exists(out));
  EXPECT_FALSE(LeftATemporaryFolder(dir.path()));
  // Outside a section SIGINT is back to what it was before (the default here: not caught).
  struct sigaction now {};
  ::sigaction(SIGINT, nullptr, &now);
  EXPECT_EQ(now.sa_handler, SIG_DFL);
}

// A signal the process ignores (nohup, a shell's background job) stays ignored in a section;
// sections nest, the outer one's handler and noted signal standing until it ends.
TEST(CheckpointWriter, IgnoredSignalsStayIgnoredAndSectionsNest) {
  struct sigaction ignore {}, before {};
  ignore.sa_handler = SIG_IGN;
  sigemptyset(&ignore.sa_mask);
  ASSERT_EQ(::sigaction(SIGHUP, &ignore, &before), 0);
  {
    InterruptibleSection outer;
    ::raise(SIGHUP);
    EXPECT_FALSE(Interrupted());
    {
      InterruptibleSection inner;
      ::raise(SIGINT);
      EXPECT_TRUE(Interrupted());
    }
    EXPECT_TRUE(Interrupted());  // the inner section's end neither cleared it nor unhooked
    ::raise(SIGTERM);            // still noted, not fatal
  }
  struct sigaction now {};
  ::sigaction(SIGHUP, nullptr, &now);
  EXPECT_EQ(now.sa_handler, SIG_IGN);
  ::sigaction(SIGINT, nullptr, &now);
  EXPECT_EQ(now.sa_handler, SIG_DFL);
  ::sigaction(SIGHUP, &before, nullptr);
}

// An exception out of the writer (it escaped to main's handler) also removes the folder.
TEST(CheckpointWriter, AnExceptionRemovesTheTemporaryFolder) {
  TempDir dir;
  const std::string out = dir.Path("out");
  EXPECT_THROW(
      (void)WriteCheckpointAtomically(out, out, "loom merge", [&](const std::string& tmp) -> Status {
        WriteBytes(tmp + "/partial", "x");
        throw std::runtime_error("boom");
      }),
      std::runtime_error);
  EXPECT_FALSE(fs::exists(out));
  EXPECT_FALSE(LeftATemporaryFolder(dir.path()));
}

// The checkpoint folder gets what mkdir would give under the user's umask, or keeps the mode of
// the empty --out it replaces (a fixed 0755 opened a private folder to everyone); a replaced
// output file keeps its mode too.
TEST(CheckpointWriter, ModesFollowTheUmaskOrWhatIsReplaced) {
  TempDir dir;
  auto write = [](const std::string& tmp) {
    WriteBytes(tmp + "/f", "x");
    return OkStatus();
  };
  {
    ScopedUmask mask(077);
    const std::string out = dir.Path("private_new");
    ASSERT_TRUE(WriteCheckpointAtomically(out, out, "loom merge", write).ok());
    EXPECT_EQ(ModeOf(out), 0700u);
  }
  {
    ScopedUmask mask(022);
    const std::string out = dir.Path("kept_private");
    fs::create_directories(out);
    ::chmod(out.c_str(), 0700);
    ASSERT_TRUE(WriteCheckpointAtomically(out, out, "loom merge", write).ok());
    EXPECT_EQ(ModeOf(out), 0700u);
    const std::string fresh = dir.Path("fresh");
    ASSERT_TRUE(WriteCheckpointAtomically(fresh, fresh, "loom merge", write).ok());
    EXPECT_EQ(ModeOf(fresh), 0755u);
    EXPECT_EQ(UmaskedMode(0666), 0644u);
    const std::string file = dir.Path("per_token.json");
    WriteBytes(file, "old");
    ::chmod(file.c_str(), 0600);
    ASSERT_TRUE(ReplaceFileAtomically(file, "new", "--per-token").ok());
    EXPECT_EQ(ModeOf(file), 0600u);
    const std::string new_file = dir.Path("new.json");
    ASSERT_TRUE(ReplaceFileAtomically(new_file, "new", "--per-token").ok());
    EXPECT_EQ(ModeOf(new_file), 0644u);
  }
}

TEST(CheckpointWriter, TheFolderIsPrivateWhileItsFilesAreWritten) {
  // A shared scratch --out (1777): the files are written into a 0700 folder, which gets --out's
  // mode (sticky bit included) only once they are all there; opened to others during the write,
  // another user could plant a link under a name the writer then opened and truncated.
  TempDir dir;
  ScopedUmask mask(022);
  const std::string out = dir.Path("shared");
  fs::create_directories(out);
  ASSERT_EQ(::chmod(out.c_str(), 01777), 0);
  unsigned int mode_while_writing = 0;
  auto write = [&](const std::string& tmp) {
    mode_while_writing = ModeOf(tmp);
    WriteBytes(tmp + "/f", "x");
    return OkStatus();
  };
  ASSERT_TRUE(WriteCheckpointAtomically(out, out, "loom merge", write).ok());
  EXPECT_EQ(mode_while_writing, 0700u);
  EXPECT_EQ(ModeOf(out), 01777u);
}

class CheckpointWriterMerge : public ::testing::Test {
 protected:
  void SetUp() override {
    model_dir_ = dir_.Path("model");
    CopyDir(kFixtures + "/models/llama_f32", model_dir_);
    auto m = Model::Load(model_dir_);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    model_ = std::move(m).value();
    auto a = LoadAdapter("a", kFixtures + "/adapters/llama_qv_r8_f32", model_->sites(), 0);
    ASSERT_TRUE(a.ok()) << a.status().ToString();
    adapter_ = std::move(a).value();
  }
  Status Merge(const std::string& out) {
    return WriteMergedCheckpoint(model_dir_, *model_, *adapter_, out, 1 << 30);
  }
  TempDir dir_;
  std::string model_dir_;
  std::unique_ptr<Model> model_;
  std::shared_ptr<const Adapter> adapter_;
};

// A file loom reads that is a FIFO, a folder or otherwise not a regular file: the checkpoint
// would lack it, so the merge fails naming it (it was skipped and the merge exited 0).
TEST_F(CheckpointWriterMerge, AFileLoomReadsThatIsNotARegularFileIsAnError) {
  const std::string tok = model_dir_ + "/tokenizer_config.json";
  fs::remove(tok);
  fs::create_directories(tok);
  Status st = Merge(dir_.Path("out1"));
  EXPECT_STATUS(st, StatusCode::kInvalidArgument, "tokenizer_config.json", "a folder");
  fs::remove_all(tok);
  ASSERT_EQ(::mkfifo(tok.c_str(), 0644), 0);
  st = Merge(dir_.Path("out2"));
  EXPECT_STATUS(st, StatusCode::kInvalidArgument, "tokenizer_config.json", "not a regular file");
  EXPECT_FALSE(fs::exists(dir_.Path("out1")));
  EXPECT_FALSE(fs::exists(dir_.Path("out2")));
  EXPECT_FALSE(LeftATemporaryFolder(dir_.path()));
  // Any other special file is still skipped with a warning.
  fs::remove(tok);
  ASSERT_EQ(::mkfifo((model_dir_ + "/notes.fifo").c_str(), 0644), 0);
  EXPECT_TRUE(Merge(dir_.Path("out3")).ok());
  EXPECT_FALSE(fs::exists(dir_.Path("out3") + "/notes.fifo"));
}

// --out spellings refused before the merge's work: a symbolic link given with a trailing slash
// (its target was written), a name too long for the temporary sibling (ENAMETOOLONG at the end).
TEST_F(CheckpointWriterMerge, OutSpellingsFoundLateAreRefusedFirst) {
  const std::string target = dir_.Path("empty_target");
  fs::create_directories(target);
  fs::create_symlink(target, dir_.Path("link"));
  for (const std::string& out : {dir_.Path("link") + "/", dir_.Path("link") + "//"}) {
    EXPECT_STATUS(Merge(out), StatusCode::kInvalidArgument, "--out", "is a symbolic link");
  }
  EXPECT_TRUE(fs::is_empty(target));
  EXPECT_STATUS(Merge(dir_.Path(std::string(240, 'n'))), StatusCode::kInvalidArgument, "--out",
                "longer than 200 bytes");
  EXPECT_FALSE(LeftATemporaryFolder(dir_.path()));
}

}  // namespace
}  // namespace loom
