// ConfinedOpenScope: files opened inside a root only, also while someone swaps folders under it
// for symbolic links out of it (the --lora-dir TOCTOU race), and the adapter store using it.
#include <gtest/gtest.h>
#include <stdio.h>  // renameat2, RENAME_EXCHANGE
#include <fcntl.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <thread>

#include "adversarial_util.h"
#include "base/file.h"
#include "base/mmap_file.h"
#include "lora/adapter_store.h"
#include "model/model.h"

namespace loom {
namespace {

using namespace loom::testing;

void Write(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

TEST(ConfinedOpen, OpensInsideTheRootAndRefusesLinksOut) {
  TempDir tmp;
  const std::string root = fs::canonical(tmp.path()).string() + "/root";
  fs::create_directories(root + "/sub");
  fs::create_directories(root + "c");  // a sibling whose name starts with the root's
  Write(root + "/sub/f", "inside");
  Write(root + "c/f", "sibling");
  Write(tmp.Path("outside"), "outside");
  fs::create_symlink("../sub/f", root + "/sub/up");       // relative, stays inside
  fs::create_symlink(root + "/sub/f", root + "/abs");     // absolute, inside
  fs::create_symlink(tmp.Path("outside"), root + "/out");  // out of the root
  fs::create_symlink("../rootc", root + "/sib");           // to the sibling
  fs::create_symlink(root + "/sub", root + "/dirlink");     // a linked folder inside

  ConfinedOpenScope scope(root);
  for (const char* p : {"/sub/f", "/sub/up", "/abs", "/dirlink/f", "/sub/../sub/f"}) {
    auto text = ReadFileBounded(root + p, 100);
    ASSERT_TRUE(text.ok()) << p << ": " << text.status().message();
    EXPECT_EQ(*text, "inside") << p;
  }
  auto mapped = MappedFile::ReadIntoMemory(root + "/abs");
  ASSERT_TRUE(mapped.ok()) << mapped.status().message();
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(mapped.value()->data()), 6), "inside");
  for (const std::string& p : {root + "/out", root + "/sib/f", root + "c/f", tmp.Path("outside")}) {
    auto text = ReadFileBounded(p, 100);
    ASSERT_FALSE(text.ok()) << p;
    EXPECT_NE(text.status().message().find("outside " + root), std::string::npos)
        << text.status().message();
  }
  EXPECT_EQ(ReadFileBounded(root + "/missing", 100).status().code(), StatusCode::kNotFound);
  // A link out of the root says so and nothing else about its target: not where it resolves to
  // (the path said where), not what kind of file is there (the stat before the open said "is a
  // character device" for a link to /dev/null).
  fs::create_symlink("/dev/null", root + "/dev");
  for (const std::string& p : {root + "/out", root + "/dev"}) {
    const std::string message(ReadFileBounded(p, 100).status().message());
    EXPECT_NE(message.find("resolves outside " + root), std::string::npos) << message;
    EXPECT_EQ(message.find((fs::canonical(tmp.path()) / "outside").string()), std::string::npos)
        << message;
    EXPECT_EQ(message.find("device"), std::string::npos) << message;
  }
  {
    ConfinedOpenScope inner(fs::canonical(tmp.path()).string());  // the innermost scope applies
    EXPECT_TRUE(ReadFileBounded(tmp.Path("outside"), 100).ok());
  }
  EXPECT_FALSE(ReadFileBounded(tmp.Path("outside"), 100).ok());
}

TEST(ConfinedOpen, NoScopeNoConfinement) {
  TempDir tmp;
  Write(tmp.Path("f"), "x");
  EXPECT_TRUE(ReadFileBounded(tmp.Path("f"), 10).ok());
}

// A thread swaps root/a (a real folder) and root/b (a link out of the root) atomically, over and
// over, while the main thread reads root/a/f: a read either gets the inside bytes or fails,
// never the outside ones (the unconfined open read them within a few hundred tries).
TEST(ConfinedOpen, FolderSwappedForALinkDuringTheOpenNeverReadsOutside) {
  TempDir tmp;
  const std::string base = fs::canonical(tmp.path()).string();
  const std::string root = base + "/root";
  fs::create_directories(root + "/a");
  fs::create_directories(base + "/out");
  Write(root + "/a/f", "inside");
  Write(base + "/out/f", "outside");
  fs::create_symlink(base + "/out", root + "/b");
  std::atomic<bool> stop{false};
  std::thread swapper([&] {
    while (!stop.load()) {
      ::renameat2(AT_FDCWD, (root + "/a").c_str(), AT_FDCWD, (root + "/b").c_str(), RENAME_EXCHANGE);
    }
  });
  int inside = 0, refused = 0, outside = 0;
  {
    ConfinedOpenScope scope(root);
    for (int i = 0; i < 3000; ++i) {
      auto text = ReadFileBounded(root + "/a/f", 100);
      if (!text.ok()) {
        ++refused;
      } else if (*text == "inside") {
        ++inside;
      } else {
        ++outside;
      }
    }
  }
  stop = true;
  swapper.join();
  EXPECT_EQ(outside, 0) << "inside " << inside << ", refused " << refused;
}

// The store opens --lora-dir adapters through the scope. The race made deterministic: the folder
// is swapped for a link out of the root after ResolveRuntimePath checked it and before the load,
// and again before an evicted adapter is reloaded; neither load reads the adapter outside.
TEST(ConfinedOpen, AdapterStoreNeverLoadsAFolderSwappedAfterItsCheck) {
  const std::string adapters = std::string(LOOM_FIXTURES) + "/adapters/";
  auto model = Model::Load(std::string(LOOM_FIXTURES) + "/models/llama_f32");
  ASSERT_TRUE(model.ok()) << model.status().message();
  TempDir tmp;
  const std::string base = fs::canonical(tmp.path()).string();
  const std::string root = base + "/root";
  fs::create_directories(root);
  fs::copy(adapters + "llama_mlp_r6", root + "/a");
  fs::copy(adapters + "llama_all_r4_f16", root + "/other");
  fs::copy(adapters + "llama_qv_r8_f32", base + "/out");
  fs::create_symlink(base + "/out", root + "/b");
  auto swap = [&] {
    ASSERT_EQ(::renameat2(AT_FDCWD, (root + "/a").c_str(), AT_FDCWD, (root + "/b").c_str(),
                          RENAME_EXCHANGE), 0);
  };
  AdapterStoreOptions o;
  o.lora_dirs = {root};
  o.max_cpu_loras = 1;
  AdapterStore store(&(*model)->sites(), o);

  auto dir = store.ResolveRuntimePath("a");
  ASSERT_TRUE(dir.ok());
  swap();  // root/a is now a link to base/out
  Status st = store.Register("x", dir->dir, dir->root);
  ASSERT_FALSE(st.ok()) << "loaded the adapter outside the root";
  EXPECT_NE(st.message().find("outside " + root), std::string::npos) << st.message();
  swap();  // back

  ASSERT_TRUE(store.Register("x", dir->dir, dir->root).ok());
  ASSERT_TRUE(store.Register("y", root + "/other").ok());  // evicts x (max_cpu_loras 1)
  ASSERT_EQ(store.num_evictions(), 1);
  swap();
  auto reloaded = store.Acquire("x");
  EXPECT_FALSE(reloaded.ok()) << "reloaded the adapter outside the root";
  swap();
  reloaded = store.Acquire("x");
  ASSERT_TRUE(reloaded.ok()) << reloaded.status().message();
  EXPECT_EQ((*reloaded)->config().r, 6);
}

// RegularFileExists and IsDirectory under the scope: a path that leads out of the root is refused
// as OpenRegularFile refuses it, with one answer whether or not something is there (they followed
// the link: false for a missing target, true or "is a folder" for an existing one, which told a
// client of the load endpoint which files the machine has).
TEST(ConfinedOpen, ExistenceChecksRefuseLinksOutWhetherOrNotTheTargetExists) {
  TempDir tmp;
  const std::string base = fs::canonical(tmp.path()).string();
  const std::string root = base + "/root";
  fs::create_directories(root + "/sub");
  fs::create_directories(base + "/outdir");
  Write(root + "/sub/f", "inside");
  Write(base + "/outfile", "outside");
  fs::create_symlink(base + "/outfile", root + "/to_file");          // an existing file outside
  fs::create_symlink(base + "/missing", root + "/to_missing");       // nothing outside
  fs::create_symlink(base + "/outdir", root + "/to_dir");            // an existing folder outside
  fs::create_symlink("../missing2", root + "/rel_missing");          // relative, nothing outside
  fs::create_symlink(root + "/to_missing", root + "/chain");         // a link to the link out
  fs::create_symlink(root + "/sub/none", root + "/inside_missing");  // nothing, inside
  ConfinedOpenScope scope(root);
  for (const char* p : {"/to_file", "/to_missing", "/to_dir", "/rel_missing", "/chain", "/to_dir/x",
                        "/to_missing/x"}) {
    for (int dir = 0; dir < 2; ++dir) {
      StatusOr<bool> got = dir ? IsDirectory(root + p) : RegularFileExists(root + p);
      ASSERT_FALSE(got.ok()) << p << (dir ? " IsDirectory" : " RegularFileExists");
      EXPECT_EQ(got.status().code(), StatusCode::kInvalidArgument) << p;
      EXPECT_EQ(got.status().message(), root + p + ": resolves outside " + root) << p;
    }
  }
  EXPECT_TRUE(*RegularFileExists(root + "/sub/f"));
  EXPECT_FALSE(*RegularFileExists(root + "/sub/none"));
  EXPECT_FALSE(*RegularFileExists(root + "/none/deeper"));
  EXPECT_TRUE(*IsDirectory(root + "/sub"));
  EXPECT_FALSE(*IsDirectory(root + "/none"));
  // A link inside to nothing inside keeps its own answer.
  auto dangling = RegularFileExists(root + "/inside_missing");
  ASSERT_FALSE(dangling.ok());
  EXPECT_NE(dangling.status().message().find("symbolic link to nothing"), std::string::npos);
  {
    ConfinedOpenScope wider(base);  // the innermost scope applies
    EXPECT_TRUE(*RegularFileExists(root + "/to_file"));
    EXPECT_FALSE(*IsDirectory(root + "/to_missing"));
  }
}

// An adapter folder in a --lora-dir root whose adapter_model.bin (with no safetensors beside it)
// is a link out of the root: one answer whether the target exists (it was 400 "has only
// adapter_model.bin" for an existing file, 404 for a missing one), on demand, for a runtime path,
// and for a load after the path was checked (the link made in between).
TEST(ConfinedOpen, AdapterModelBinLinkedOutOfTheRootAnswersAlikeWhetherOrNotItExists) {
  const std::string adapters = std::string(LOOM_FIXTURES) + "/adapters/";
  auto model = Model::Load(std::string(LOOM_FIXTURES) + "/models/llama_f32");
  ASSERT_TRUE(model.ok()) << model.status().message();
  TempDir tmp;
  const std::string base = fs::canonical(tmp.path()).string();
  const std::string root = base + "/root";
  for (const char* name : {"x", "y", "late_x", "late_y"}) {
    fs::create_directories(root + "/" + name);
    fs::copy(adapters + "llama_mlp_r6/adapter_config.json", root + "/" + name);
  }
  Write(base + "/exists.bin", "outside");
  fs::create_symlink(base + "/exists.bin", root + "/x/adapter_model.bin");
  fs::create_symlink(base + "/missing.bin", root + "/y/adapter_model.bin");
  AdapterStoreOptions o;
  o.lora_dirs = {root};
  AdapterStore store(&(*model)->sites(), o);
  auto x = store.Acquire("x");
  auto y = store.Acquire("y");
  ASSERT_FALSE(x.ok());
  ASSERT_FALSE(y.ok());
  EXPECT_EQ(x.status().code(), y.status().code());
  for (const auto& st : {x.status(), y.status()}) {
    EXPECT_NE(st.message().find("adapter_model.bin is a symbolic link out of the --lora-dir root"),
              std::string::npos)
        << st.message();
  }
  auto rx = store.ResolveRuntimePath("x");
  auto ry = store.ResolveRuntimePath("y");
  ASSERT_FALSE(rx.ok());
  ASSERT_FALSE(ry.ok());
  EXPECT_EQ(rx.status().code(), ry.status().code());
  EXPECT_NE(
      ry.status().message().find("adapter_model.bin is a symbolic link out of the --lora-dir"),
      std::string::npos)
      << ry.status().message();
  // Checked, then linked out before the load: the load's existence check is confined too.
  auto lx = store.ResolveRuntimePath("late_x");
  auto ly = store.ResolveRuntimePath("late_y");
  ASSERT_TRUE(lx.ok() && ly.ok());
  fs::create_symlink(base + "/exists.bin", root + "/late_x/adapter_model.bin");
  fs::create_symlink(base + "/missing.bin", root + "/late_y/adapter_model.bin");
  Status sx = store.Register("late_x", lx->dir, lx->root);
  Status sy = store.Register("late_y", ly->dir, ly->root);
  EXPECT_EQ(sx.code(), StatusCode::kInvalidArgument) << sx.ToString();
  EXPECT_EQ(sy.code(), StatusCode::kInvalidArgument) << sy.ToString();
  for (const auto& st : {sx, sy}) {
    EXPECT_NE(st.message().find("adapter_model.bin: resolves outside " + root), std::string::npos)
        << st.message();
  }
  // Beside an adapter_model.safetensors, an adapter_model.bin is never read: a stray link there
  // (out of the root, or dangling inside it) does not refuse the adapter.
  for (const char* name : {"with_stray_out", "with_stray_dangling"}) {
    fs::create_directories(root + "/" + name);
    fs::copy(adapters + "llama_mlp_r6/adapter_config.json", root + "/" + name);
    fs::copy(adapters + "llama_mlp_r6/adapter_model.safetensors", root + "/" + name);
  }
  fs::create_symlink(base + "/exists.bin", root + "/with_stray_out/adapter_model.bin");
  fs::create_symlink(root + "/nothing.bin", root + "/with_stray_dangling/adapter_model.bin");
  for (const char* name : {"with_stray_out", "with_stray_dangling"}) {
    auto a = store.Acquire(name);
    EXPECT_TRUE(a.ok()) << name << ": " << a.status().message();
  }
  // Without one, a .bin link dangling inside the root is a missing file, not a link out.
  fs::create_directories(root + "/dangling_only");
  fs::copy(adapters + "llama_mlp_r6/adapter_config.json", root + "/dangling_only");
  fs::create_symlink(root + "/nothing.bin", root + "/dangling_only/adapter_model.bin");
  auto d = store.Acquire("dangling_only");
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().message().find("out of the --lora-dir root"), std::string::npos)
      << d.status().message();
}

}  // namespace
}  // namespace loom
