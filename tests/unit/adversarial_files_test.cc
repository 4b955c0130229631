// Adversarial files: FIFOs, devices, folders, symlink loops and oversized files given where loom
// expects a regular file. Each is refused with a Status naming the file, without blocking,
// throwing or reading forever; nothing on disk changes.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>

#include "adversarial_util.h"
#include "base/file.h"
#include "base/mmap_file.h"
#include "io/safetensors.h"
#include "lora/adapter.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace loom {
namespace {

using namespace loom::testing;

// A model folder copied from the fixtures, with `file` replaced by a FIFO.
void MakeFifo(const std::string& path) {
  std::error_code ec;
  fs::remove(path, ec);
  ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0) << path;
}

void MakeLoop(const std::string& path) {
  std::error_code ec;
  fs::remove(path, ec);
  fs::create_symlink(fs::path(path).filename().string() + ".b", path + ".a");
  fs::create_symlink(fs::path(path).filename().string() + ".a", path + ".b");
  fs::create_symlink(fs::path(path).filename().string() + ".a", path);
}

TEST(AdversarialFiles, ReadFileBoundedRefusesEverythingButRegularFiles) {
  TempDir dir;
  MakeFifo(dir.Path("fifo"));
  MakeLoop(dir.Path("loop"));
  fs::create_directory(dir.Path("folder"));
  WriteBytes(dir.Path("big"), std::string(1000, 'x'));
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_STATUS(ReadFileBounded(dir.Path("fifo"), 100, "--batch").status(),
                StatusCode::kInvalidArgument, "--batch " + dir.Path("fifo"),
                "is a FIFO, not a regular file");
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));  // no blocking open
  EXPECT_STATUS(ReadFileBounded("/dev/zero", 100).status(), StatusCode::kInvalidArgument,
                "/dev/zero", "is a character device");
  EXPECT_STATUS(ReadFileBounded(dir.Path("folder"), 100).status(), StatusCode::kInvalidArgument,
                "is a folder");
  EXPECT_STATUS(ReadFileBounded(dir.Path("loop"), 100).status(), StatusCode::kInvalidArgument,
                "symlink loop");
  EXPECT_STATUS(ReadFileBounded(dir.Path("big"), 100).status(), StatusCode::kResourceExhausted,
                "file is 1000 bytes, above the limit of 100");
  EXPECT_STATUS(ReadFileBounded(dir.Path("nope"), 100).status(), StatusCode::kNotFound,
                "no such file");
  auto ok = ReadFileBounded(dir.Path("big"), 1000);
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(ok->size(), 1000u);
  // Optional files: absent is false, a loop or a FIFO is an error, not "absent".
  EXPECT_FALSE(*RegularFileExists(dir.Path("nope")));
  EXPECT_STATUS(RegularFileExists(dir.Path("loop")).status(), StatusCode::kInvalidArgument,
                "symlink loop");
  EXPECT_STATUS(RegularFileExists(dir.Path("fifo")).status(), StatusCode::kInvalidArgument,
                "is a FIFO");
  EXPECT_STATUS(MappedFile::Open(dir.Path("fifo")).status(), StatusCode::kInvalidArgument,
                "is a FIFO");
  EXPECT_STATUS(MappedFile::Open("/dev/zero").status(), StatusCode::kInvalidArgument,
                "is a character device");
}

// Every file of a model folder, replaced in turn by a FIFO, a symlink loop and /dev/zero.
TEST(AdversarialFiles, ModelFolderWithSpecialFilesIsRefusedNamingTheFile) {
  for (const std::string file :
       {"config.json", "generation_config.json", "model.safetensors"}) {
    for (const std::string kind : {"fifo", "loop", "devzero"}) {
      SCOPED_TRACE(file + " as " + kind);
      TempDir dir;
      const std::string model = dir.Path("m");
      CopyDir(kFixtures + "/models/llama_f32", model);
      const std::string path = model + "/" + file;
      if (kind == "fifo") MakeFifo(path);
      if (kind == "loop") MakeLoop(path);
      if (kind == "devzero") {
        fs::remove(path);
        fs::create_symlink("/dev/zero", path);
      }
      const auto before = Snapshot(dir.path());
      auto m = Model::Load(model);
      ASSERT_FALSE(m.ok());
      EXPECT_TRUE(Contains(m.status().message(), file)) << m.status().message();
      EXPECT_TRUE(m.status().code() == StatusCode::kInvalidArgument) << m.status().ToString();
      EXPECT_EQ(Snapshot(dir.path()), before);
    }
  }
}

TEST(AdversarialFiles, AdapterAndTokenizerFilesAsFifosAreRefused) {
  TempDir dir;
  auto model = Model::Load(kFixtures + "/models/llama_f32");
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  for (const std::string file : {"adapter_config.json", "adapter_model.safetensors"}) {
    const std::string ad = dir.Path("ad_" + file);
    CopyDir(kFixtures + "/adapters/llama_qv_r8_f32", ad);
    MakeFifo(ad + "/" + file);
    auto a = LoadAdapter("x", ad, (*model)->sites(), 0);
    EXPECT_STATUS(a.status(), StatusCode::kInvalidArgument, "adapter 'x'", file, "is a FIFO");
  }
  MakeFifo(dir.Path("tokenizer.json"));
  auto tok = tokenizer::Tokenizer::FromFile(dir.Path("tokenizer.json"));
  EXPECT_STATUS(tok.status(), StatusCode::kInvalidArgument, "tokenizer.json", "is a FIFO");
}

}  // namespace
}  // namespace loom
