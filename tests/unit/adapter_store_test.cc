// AdapterStore: LRU eviction bounded by max_cpu_loras, leases pin, unload while leased, on-demand
// loading from --lora-dir (bounded in names, forgotten when their folder goes), runtime paths
// confined to the roots.
#include "lora/adapter_store.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <thread>

#include "base/file.h"
#include "model/model.h"

namespace loom {
namespace {

namespace fs = std::filesystem;
const std::string kModels = std::string(LOOM_FIXTURES) + "/models/";
const std::string kAdapters = std::string(LOOM_FIXTURES) + "/adapters/";

const Model& Llama() {
  static std::unique_ptr<Model> m = std::move(Model::Load(kModels + "llama_f32")).value();
  return *m;
}

TEST(AdapterStore, LruEvictsOnlyUnleasedAdapters) {
  AdapterStoreOptions o;
  o.max_cpu_loras = 2;
  AdapterStore store(&Llama().sites(), o);
  ASSERT_TRUE(store.Register("a", kAdapters + "llama_qv_r8_f32").ok());
  ASSERT_TRUE(store.Register("b", kAdapters + "llama_mlp_r6").ok());
  auto lease_a = store.Acquire("a");  // a is leased and most recent
  ASSERT_TRUE(lease_a.ok());
  ASSERT_TRUE(store.Register("c", kAdapters + "llama_all_r4_f16").ok());
  EXPECT_EQ(store.num_resident(), 2);
  EXPECT_EQ(store.num_evictions(), 1);  // b: least recently used and unleased
  // b comes back from disk when named again, with the same identity (same bytes).
  auto b = store.Acquire("b");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(store.num_loads(), 4);
  // Now a (leased) must survive although it is the oldest.
  EXPECT_EQ((*lease_a)->name(), "a");
  auto list = store.List();
  ASSERT_EQ(list.size(), 3u);
  EXPECT_TRUE(list[0].loaded);  // a
}

TEST(AdapterStore, UnloadRemovesTheNameButLeasesKeepTheWeights) {
  AdapterStore store(&Llama().sites(), {});
  ASSERT_TRUE(store.Register("a", kAdapters + "llama_qv_r8_f32").ok());
  auto lease = store.Acquire("a");
  ASSERT_TRUE(lease.ok());
  ASSERT_TRUE(store.Unregister("a").ok());
  EXPECT_FALSE(store.Contains("a"));
  EXPECT_EQ(store.Acquire("a").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(store.Unregister("a").code(), StatusCode::kNotFound);
  EXPECT_GT((*lease)->tensor_bytes(), 0u);  // still usable by in-flight sequences
}

TEST(AdapterStore, RejectsBadNamesDuplicatesAndBadFoldersWhole) {
  AdapterStore store(&Llama().sites(), {});
  EXPECT_EQ(store.Register("../x", kAdapters + "llama_mlp_r6").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(store.Register("ok", "/nonexistent").code(), StatusCode::kNotFound);
  // A qwen3 adapter does not fit the llama base: rejected, and the name stays free.
  Status st = store.Register("q", kAdapters + "qwen3_dora");
  EXPECT_FALSE(st.ok());
  EXPECT_FALSE(store.Contains("q"));
  ASSERT_TRUE(store.Register("m", kAdapters + "llama_mlp_r6").ok());
  Status dup = store.Register("m", kAdapters + "llama_mlp_r6");
  EXPECT_NE(dup.message().find("already loaded"), std::string::npos);
}

// vLLM's load_inplace: the name gets the new folder's adapter (a new identity) once it has
// loaded; a lease on the old one keeps its weights; a replacement that fails keeps the old one.
TEST(AdapterStore, ReplaceGivesTheNameANewIdentityAndAFailedOneKeepsTheOld) {
  AdapterStore store(&Llama().sites(), {});
  ASSERT_TRUE(store.Register("a", kAdapters + "llama_qv_r8_f32").ok());
  auto old_lease = store.Acquire("a");
  ASSERT_TRUE(old_lease.ok());
  ASSERT_TRUE(store.Register("a", kAdapters + "llama_mlp_r6", "", /*replace=*/true).ok());
  auto now = store.Acquire("a");
  ASSERT_TRUE(now.ok());
  EXPECT_NE((*now)->cache_identity(), (*old_lease)->cache_identity());
  EXPECT_GT((*old_lease)->tensor_bytes(), 0u);
  EXPECT_EQ(store.List().size(), 1u);
  // The old one left the table; its lease keeps it in memory, and counted, until released.
  EXPECT_EQ(store.num_resident(), 2);
  // A qwen3 adapter does not fit: refused, and "a" still serves the mlp adapter.
  EXPECT_FALSE(store.Register("a", kAdapters + "qwen3_dora", "", /*replace=*/true).ok());
  auto kept = store.Acquire("a");
  ASSERT_TRUE(kept.ok());
  EXPECT_EQ((*kept)->cache_identity(), (*now)->cache_identity());
  // Without replace the name stays taken; replace of a free name is a plain load.
  EXPECT_FALSE(store.Register("a", kAdapters + "llama_qv_r8_f32").ok());
  EXPECT_TRUE(store.Register("b", kAdapters + "llama_qv_r8_f32", "", /*replace=*/true).ok());
}

TEST(AdapterStore, OnDemandAndRuntimePathsStayInsideTheRoots) {
  const fs::path root = fs::temp_directory_path() / "loom_store_root";
  const fs::path outside = fs::temp_directory_path() / "loom_store_outside";
  fs::remove_all(root);
  fs::remove_all(outside);
  fs::create_directories(root);
  fs::copy(kAdapters + "llama_mlp_r6", root / "mlp", fs::copy_options::recursive);
  fs::copy(kAdapters + "llama_qv_r8_f32", outside, fs::copy_options::recursive);
  fs::create_directory_symlink(outside, root / "escape");
  AdapterStoreOptions o;
  o.lora_dirs = {root.string()};
  AdapterStore store(&Llama().sites(), o);
  // On demand: a sub-folder name loads on first use.
  auto mlp = store.Acquire("mlp");
  ASSERT_TRUE(mlp.ok()) << mlp.status().ToString();
  EXPECT_TRUE(store.Contains("mlp"));
  EXPECT_EQ(store.Acquire("escape").status().code(), StatusCode::kNotFound);  // symlink out
  EXPECT_EQ(store.Acquire("..").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(store.Acquire("nothere").status().code(), StatusCode::kNotFound);
  // Runtime paths.
  auto in = store.ResolveRuntimePath("mlp");
  ASSERT_TRUE(in.ok());
  EXPECT_EQ(in->dir, fs::canonical(root / "mlp").string());
  EXPECT_EQ(in->root, fs::canonical(root).string());
  EXPECT_EQ(store.ResolveRuntimePath("escape").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(store.ResolveRuntimePath(outside.string()).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(store.ResolveRuntimePath("mlp/../mlp").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(store.ResolveRuntimePath("missing").status().code(), StatusCode::kNotFound);
  // An absolute path: missing under a root is 404; outside the roots 400 whether it exists or
  // not (a 404 there told a caller which files the machine has).
  EXPECT_EQ(store.ResolveRuntimePath((root / "missing").string()).status().code(),
            StatusCode::kNotFound);
  EXPECT_EQ(store.ResolveRuntimePath((outside / "missing").string()).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(store.ResolveRuntimePath("/no/such/folder").status().code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(store.ResolveRuntimePath((root / "." / "mlp").string()).ok());
  // Through the symlink out of the root to a missing file: 400 too, not 404.
  EXPECT_EQ(store.ResolveRuntimePath("escape/missing").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(store.ResolveRuntimePath((root / "escape" / "missing").string()).status().code(),
            StatusCode::kInvalidArgument);
  // A root given with a trailing slash (and through a symlink): an absolute path in its
  // spelling is inside it.
  const fs::path alias = fs::temp_directory_path() / "loom_store_root_alias";
  fs::remove(alias);
  fs::create_directory_symlink(root, alias);
  AdapterStoreOptions slash;
  slash.lora_dirs = {alias.string() + "/"};
  AdapterStore aliased(&Llama().sites(), slash);
  auto via_alias = aliased.ResolveRuntimePath((alias / "mlp").string());
  ASSERT_TRUE(via_alias.ok()) << via_alias.status().ToString();
  EXPECT_EQ(via_alias->dir, fs::canonical(root / "mlp").string());
  EXPECT_EQ(aliased.ResolveRuntimePath((alias / "missing").string()).status().code(),
            StatusCode::kNotFound);
  fs::remove(alias);
  fs::remove_all(root);
  fs::remove_all(outside);
}

// SPEC-api's /v1/models: every name a request may give — the table's and the --lora-dir
// sub-folders that would load on demand — and none of the latter while the table is full.
TEST(AdapterStore, ListNameableHasTheRootsSubFoldersThatWouldLoad) {
  const fs::path root = fs::temp_directory_path() / "loom_store_listing";
  const fs::path outside = fs::temp_directory_path() / "loom_store_listing_out";
  fs::remove_all(root);
  fs::remove_all(outside);
  fs::create_directories(root / "junk");  // no adapter_config.json
  fs::copy(kAdapters + "llama_mlp_r6", root / "mlp", fs::copy_options::recursive);
  fs::copy(kAdapters + "llama_qv_r8_f32", root / "qv", fs::copy_options::recursive);
  fs::copy(kAdapters + "llama_qv_r8_f32", outside, fs::copy_options::recursive);
  fs::create_directory_symlink(outside, root / "escape");
  fs::copy(kAdapters + "llama_qv_r8_f32", root / "bad name", fs::copy_options::recursive);
  AdapterStoreOptions o;
  o.lora_dirs = {root.string()};
  o.max_names = 2;
  AdapterStore store(&Llama().sites(), o);
  auto names = [&] {
    std::vector<std::string> out;
    for (const auto& a : store.ListNameable()) out.push_back(a.name + (a.loaded ? "*" : ""));
    return out;
  };
  EXPECT_EQ(names(), (std::vector<std::string>{"mlp", "qv"}));
  EXPECT_TRUE(store.List().empty());
  EXPECT_EQ(store.ListNameable()[0].dir, fs::canonical(root / "mlp").string());
  ASSERT_TRUE(store.Register("reg", kAdapters + "llama_all_r4_f16").ok());
  ASSERT_TRUE(store.Acquire("mlp").ok());
  EXPECT_EQ(names(), (std::vector<std::string>{"mlp*", "reg*"}));  // full: qv cannot be named
  ASSERT_TRUE(store.Unregister("reg").ok());
  EXPECT_EQ(names(), (std::vector<std::string>{"mlp*", "qv"}));
  fs::remove_all(root);
  fs::remove_all(outside);
}

// Requests naming an adapter that is being loaded wait for that one load and share its result,
// success or error (each ran the whole load again, one after another). The first load is held
// until the 7 other threads wait for it inside the store (at most 10 s).
TEST(AdapterStore, ConcurrentAcquiresOfOneNameShareOneLoad) {
  const fs::path root = fs::temp_directory_path() / "loom_store_flight";
  fs::remove_all(root);
  fs::create_directories(root / "bad");
  fs::copy(kAdapters + "llama_mlp_r6", root / "mlp", fs::copy_options::recursive);
  fs::copy(kAdapters + "llama_mlp_r6", root / "bad", fs::copy_options::recursive);
  fs::remove(root / "bad" / "adapter_model.safetensors");
  constexpr int kThreads = 8;
  std::atomic<int> loads{0};
  AdapterStore* current = nullptr;  // the store being tested
  AdapterStoreOptions o;
  o.lora_dirs = {root.string()};
  o.on_load = [&](const std::string&) {
    if (loads.fetch_add(1) != 0) return;
    const auto limit = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (current->num_waiting_for_loads() < kThreads - 1 &&
           std::chrono::steady_clock::now() < limit) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  };
  for (const char* name : {"mlp", "bad"}) {
    loads = 0;
    AdapterStore store(&Llama().sites(), o);
    current = &store;
    std::vector<StatusOr<std::shared_ptr<const Adapter>>> got(kThreads, Internal("not run"));
    std::vector<std::thread> threads;
    for (int i = 0; i < kThreads; ++i) {
      threads.emplace_back([&, i] { got[static_cast<size_t>(i)] = store.Acquire(name); });
    }
    for (auto& t : threads) t.join();
    EXPECT_EQ(loads.load(), 1) << name;
    for (const auto& g : got) {
      EXPECT_EQ(g.ok(), got[0].ok()) << name;
      if (g.ok()) {
        EXPECT_EQ(g->get(), got[0]->get());
      } else {
        EXPECT_EQ(g.status().message(), got[0].status().message());
      }
    }
    EXPECT_EQ(got[0].ok(), std::string(name) == "mlp") << got[0].status().ToString();
  }
  fs::remove_all(root);
}

// At most max_load_threads requests load or wait for a load; one more is refused at once with
// kUnavailable (a 503), so loads cannot hold every HTTP handler thread. The first load is held
// until a second request waits for it (at most 10 s); a third, for another name, is refused; the
// two held ones then succeed, and once they are done a new name loads again.
TEST(AdapterStore, LoadsBeyondTheThreadCapAreRefusedAtOnce) {
  const fs::path root = fs::temp_directory_path() / "loom_store_load_cap";
  fs::remove_all(root);
  fs::create_directories(root);
  fs::copy(kAdapters + "llama_mlp_r6", root / "mlp", fs::copy_options::recursive);
  fs::copy(kAdapters + "llama_mlp_r6", root / "other", fs::copy_options::recursive);
  std::atomic<int> loads{0};
  std::atomic<bool> release{false};
  AdapterStoreOptions o;
  o.lora_dirs = {root.string()};
  o.max_load_threads = 2;
  o.on_load = [&](const std::string&) {
    if (loads.fetch_add(1) != 0) return;
    const auto limit = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!release && std::chrono::steady_clock::now() < limit) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  };
  AdapterStore store(&Llama().sites(), o);
  StatusOr<std::shared_ptr<const Adapter>> first = Internal("not run"), second = Internal("not run");
  std::thread a([&] { first = store.Acquire("mlp"); });
  const auto limit = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (loads.load() == 0 && std::chrono::steady_clock::now() < limit) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  std::thread b([&] { second = store.Acquire("mlp"); });
  while (store.num_waiting_for_loads() < 1 && std::chrono::steady_clock::now() < limit) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  const bool both_held = loads.load() == 1 && store.num_waiting_for_loads() == 1;
  const auto refused = store.Acquire("other");
  // Answers that need no load are not refused: an unknown name is 404 as ever.
  const auto unknown = store.Acquire("nothing_here");
  release = true;
  a.join();
  b.join();
  ASSERT_TRUE(both_held);
  EXPECT_EQ(unknown.status().code(), StatusCode::kNotFound) << unknown.status().ToString();
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(refused.status().message().find("adapter 'other' is not loaded, and 2 requests"),
            std::string::npos)
      << refused.status().message();
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  EXPECT_EQ(first->get(), second->get());
  EXPECT_TRUE(store.Acquire("other").ok());
  EXPECT_EQ(loads.load(), 2);
  fs::remove_all(root);
}

// A read-only audit's race: an on-demand load of sub-folder X waits for the load lock while
// /v1/load_lora_adapter registers the name X from another folder; that entry is evicted before
// the on-demand load publishes. The on-demand weights must not land in the entry (they served
// under the registered name, whose /v1/models root said the other folder). The on_load hook
// and the waits order the steps: the registration's load waits until another registration (Y,
// whose publish evicts the registered X under --max-cpu-loras 1) and then the on-demand request
// have queued for the load lock.
TEST(AdapterStore, AnOnDemandLoadNeverLandsInANameRegisteredFromAnotherFolder) {
  const fs::path root = fs::temp_directory_path() / "loom_store_race";
  fs::remove_all(root);
  fs::create_directories(root);
  fs::copy(kAdapters + "llama_qv_r8_f32", root / "X", fs::copy_options::recursive);
  fs::copy(kAdapters + "llama_mlp_r6", root / "other", fs::copy_options::recursive);
  fs::copy(kAdapters + "llama_all_r4_f16", root / "Y", fs::copy_options::recursive);
  std::atomic<int> x_loads{0};
  std::atomic<bool> go{false};
  AdapterStoreOptions o;
  o.lora_dirs = {root.string()};
  o.max_cpu_loras = 1;
  o.on_load = [&](const std::string& name) {
    if (name != "X") return;
    if (x_loads.fetch_add(1) == 0) {  // the registration's load: until the others queue behind it
      const auto limit = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (!go.load() && std::chrono::steady_clock::now() < limit) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    }
  };
  AdapterStore store(&Llama().sites(), o);
  auto other = store.ResolveRuntimePath("other");
  ASSERT_TRUE(other.ok());
  // Loads run one at a time, in the order they queue: the registration of X (from the other
  // folder), then Y's (whose publish evicts the registered X), then the on-demand load of X that
  // began while X was not a name yet.
  std::thread registrar([&] { EXPECT_TRUE(store.Register("X", other->dir, other->root).ok()); });
  while (x_loads.load() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  std::thread evictor([&] { EXPECT_TRUE(store.Register("Y", (root / "Y").string()).ok()); });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // it reaches the load lock
  StatusOr<std::shared_ptr<const Adapter>> got = Internal("not run");
  std::thread on_demand([&] { got = store.Acquire("X"); });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // it reaches the load lock
  go = true;
  registrar.join();
  evictor.join();
  on_demand.join();
  // The on-demand load (of root/X) was not published; the registered folder was loaded again.
  EXPECT_EQ(x_loads.load(), 3);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  // The name serves what it was registered from (the other folder), now and on the next use.
  auto want = LoadAdapter("X", (root / "other").string(), Llama().sites(), 0);
  ASSERT_TRUE(want.ok());
  EXPECT_EQ((*got)->cache_identity(), (*want)->cache_identity());
  auto again = store.Acquire("X");
  ASSERT_TRUE(again.ok());
  EXPECT_EQ((*again)->cache_identity(), (*want)->cache_identity());
  fs::remove_all(root);
}

// An adapter unloaded or replaced while sequences hold it stays in memory until they end: it
// counts against the bounds meanwhile (each unload + load under traffic left another copy the
// bounds did not see), and stops counting once released.
TEST(AdapterStore, RetiredAdaptersInUseCountAgainstTheBounds) {
  AdapterStoreOptions o;
  o.max_cpu_loras = 2;
  AdapterStore store(&Llama().sites(), o);
  ASSERT_TRUE(store.Register("a", kAdapters + "llama_qv_r8_f32").ok());
  auto running = store.Acquire("a");  // a sequence runs on a
  ASSERT_TRUE(running.ok());
  ASSERT_TRUE(store.Register("a", kAdapters + "llama_mlp_r6", "", /*replace=*/true).ok());
  EXPECT_EQ(store.num_resident(), 2);  // the new a, and the old one still in use
  ASSERT_TRUE(store.Register("b", kAdapters + "llama_all_r4_f16").ok());
  // 3 in memory against a bound of 2: the new a (unleased, least recent) goes, not the old one.
  EXPECT_EQ(store.num_resident(), 2);
  EXPECT_EQ(store.num_evictions(), 1);
  EXPECT_FALSE(store.List()[0].loaded && store.List()[1].loaded);
  // Unloading b while nobody uses it frees it at once; the old a ends with its sequence.
  ASSERT_TRUE(store.Unregister("b").ok());
  EXPECT_EQ(store.num_resident(), 1);
  running = Internal("the sequence ended");
  store.Trim();
  EXPECT_EQ(store.num_resident(), 0);
  auto again = store.Acquire("a");  // the replacement, back from disk
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(store.num_resident(), 1);
}

TEST(AdapterStore, RuntimeLoadingNeedsRoots) {
  AdapterStore store(&Llama().sites(), {});
  EXPECT_EQ(store.ResolveRuntimePath(kAdapters + "llama_mlp_r6").status().code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace loom

namespace loom {
namespace {

// Requests hold (lease) their adapters while they wait: with every adapter in memory held, a
// load of another (registered, on demand, or one whose weights were evicted) is refused with
// kUnavailable naming it and the flag, instead of loading past --max-cpu-loras (every queued
// request for a new --lora-dir name loaded one more). Adapters in memory are still given; once a
// lease ends, the load evicts it.
TEST(AdapterStore, LoadsPastTheBoundWhileEveryAdapterIsLeasedAreRefused) {
  const fs::path root = fs::temp_directory_path() / "loom_store_leased_bound";
  fs::remove_all(root);
  fs::create_directories(root);
  fs::copy(kAdapters + "llama_all_r4_f16", root / "d", fs::copy_options::recursive);
  AdapterStoreOptions o;
  o.max_cpu_loras = 2;
  o.lora_dirs = {root.string()};
  AdapterStore store(&Llama().sites(), o);
  ASSERT_TRUE(store.Register("a", kAdapters + "llama_qv_r8_f32").ok());
  ASSERT_TRUE(store.Register("b", kAdapters + "llama_mlp_r6").ok());
  {
    auto la = store.Acquire("a");
    auto lb = store.Acquire("b");
    ASSERT_TRUE(la.ok() && lb.ok());
    Status st = store.Register("c", kAdapters + "llama_all_r4_f16");
    EXPECT_EQ(st.code(), StatusCode::kUnavailable) << st.ToString();
    EXPECT_NE(st.message().find("adapter 'c' cannot be loaded"), std::string::npos) << st.message();
    EXPECT_NE(st.message().find("--max-cpu-loras 2"), std::string::npos) << st.message();
    EXPECT_FALSE(store.Contains("c"));
    auto d = store.Acquire("d");  // on demand
    EXPECT_EQ(d.status().code(), StatusCode::kUnavailable) << d.status().ToString();
    EXPECT_NE(d.status().message().find("adapter 'd'"), std::string::npos);
    EXPECT_FALSE(store.Contains("d"));
    EXPECT_EQ(store.num_resident(), 2);
    EXPECT_EQ(store.num_loads(), 2);
    EXPECT_TRUE(store.Acquire("a").ok());  // in memory: given
    lb = Internal("the request ended");
    ASSERT_TRUE(store.Register("c", kAdapters + "llama_all_r4_f16").ok());  // b makes room
    EXPECT_EQ(store.num_resident(), 2);
    EXPECT_EQ(store.num_evictions(), 1);
  }
  // A load takes time: leases taken while it reads are seen before it is published.
  AdapterStore* late = nullptr;
  std::vector<StatusOr<std::shared_ptr<const Adapter>>> taken;
  AdapterStoreOptions slow = o;
  slow.on_load = [&](const std::string& name) {
    if (name != "d" || late == nullptr) return;
    taken.push_back(late->Acquire("a"));
    taken.push_back(late->Acquire("b"));
  };
  AdapterStore store2(&Llama().sites(), slow);
  ASSERT_TRUE(store2.Register("a", kAdapters + "llama_qv_r8_f32").ok());
  ASSERT_TRUE(store2.Register("b", kAdapters + "llama_mlp_r6").ok());
  late = &store2;
  auto d = store2.Acquire("d");
  ASSERT_EQ(taken.size(), 2u);
  EXPECT_TRUE(taken[0].ok() && taken[1].ok());
  EXPECT_EQ(d.status().code(), StatusCode::kUnavailable) << d.status().ToString();
  EXPECT_EQ(store2.num_resident(), 2);
  taken.clear();
  late = nullptr;
  auto d2 = store2.Acquire("d");  // nothing held now: a or b is evicted for it
  EXPECT_TRUE(d2.ok()) << d2.status().ToString();
  EXPECT_EQ(store2.num_resident(), 2);
  fs::remove_all(root);
}

// `loom serve` lets requests hold --max-loras adapters past --max-cpu-loras (what one step can
// run): at --max-cpu-loras 1, requests that always hold one busy adapter do not refuse every
// other adapter; past the overshoot loads are refused; once released the store trims back.
TEST(AdapterStore, RequestsMayHoldTheOvershootPastTheBound) {
  AdapterStoreOptions o;
  o.max_cpu_loras = 1;
  o.max_cpu_overshoot = 1;
  AdapterStore store(&Llama().sites(), o);
  ASSERT_TRUE(store.Register("a", kAdapters + "llama_qv_r8_f32").ok());
  auto la = store.Acquire("a");
  ASSERT_TRUE(la.ok());
  {
    Status b = store.Register("b", kAdapters + "llama_mlp_r6");
    ASSERT_TRUE(b.ok()) << b.ToString();  // a is held: one past the bound
    auto lb = store.Acquire("b");
    ASSERT_TRUE(lb.ok()) << lb.status().ToString();
    EXPECT_EQ(store.num_resident(), 2);
    Status c = store.Register("c", kAdapters + "llama_all_r4_f16");
    EXPECT_EQ(c.code(), StatusCode::kUnavailable) << c.ToString();
    EXPECT_NE(c.message().find("--max-loras"), std::string::npos) << c.message();
  }
  // b's lease ended: c loads in its place (a is still held), and once a's lease ends too the
  // store is back at its bound (the most recent adapter stays).
  EXPECT_TRUE(store.Register("c", kAdapters + "llama_all_r4_f16").ok());
  EXPECT_EQ(store.num_resident(), 2);
  la = Internal("the request ended");
  store.Trim();
  EXPECT_EQ(store.num_resident(), 1);
}

// --max-cpu-lora-memory likewise: adapters held by requests leave no room for another's bytes.
TEST(AdapterStore, LoadsPastTheBytesBoundWhileAdaptersAreLeasedAreRefused) {
  auto a = LoadAdapter("a", kAdapters + "llama_mlp_r6", Llama().sites(), 0);
  auto b = LoadAdapter("b", kAdapters + "llama_qv_r8_f32", Llama().sites(), 0);
  ASSERT_TRUE(a.ok() && b.ok());
  AdapterStoreOptions o;
  o.max_cpu_bytes = (*a)->resident_bytes() + (*b)->resident_bytes();
  AdapterStore store(&Llama().sites(), o);
  ASSERT_TRUE(store.Register("a", kAdapters + "llama_mlp_r6").ok());
  ASSERT_TRUE(store.Register("b", kAdapters + "llama_qv_r8_f32").ok());
  auto la = store.Acquire("a");
  auto lb = store.Acquire("b");
  Status st = store.Register("c", kAdapters + "llama_qv_r8_f32");
  EXPECT_EQ(st.code(), StatusCode::kUnavailable) << st.ToString();
  EXPECT_NE(st.message().find("adapter 'c'"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("--max-cpu-lora-memory"), std::string::npos) << st.message();
  // b free, a (the larger) held: room for b's size, not for a second a, known once it loaded.
  ASSERT_GT((*a)->resident_bytes(), (*b)->resident_bytes());
  lb = Internal("the request ended");
  st = store.Register("c", kAdapters + "llama_mlp_r6");
  EXPECT_EQ(st.code(), StatusCode::kUnavailable) << st.ToString();
  EXPECT_NE(st.message().find("adapter 'c' (" + std::to_string((*a)->resident_bytes()) +
                              " bytes loaded) cannot be loaded"),
            std::string::npos)
      << st.message();
  EXPECT_FALSE(store.Contains("c"));
  EXPECT_TRUE(store.Register("c", kAdapters + "llama_qv_r8_f32").ok());  // b evicted for it
  EXPECT_EQ(store.num_resident(), 2);
}

}  // namespace
}  // namespace loom

namespace loom {
namespace {

// --max-cpu-lora-memory: the store keeps the loaded adapters' resident bytes under the bound
// (least recently used evicted first) and refuses one adapter that alone exceeds it.
TEST(AdapterStore, BytesBoundEvictsAndRefusesAnAdapterLargerThanIt) {
  auto a = LoadAdapter("a", kAdapters + "llama_mlp_r6", Llama().sites(), 0);
  auto b = LoadAdapter("b", kAdapters + "llama_qv_r8_f32", Llama().sites(), 0);
  ASSERT_TRUE(a.ok() && b.ok());
  // Resident: at least the file read in plus B's panels (same dtype as B).
  EXPECT_GT((*a)->resident_bytes(), (*a)->tensor_bytes());
  AdapterStoreOptions o;
  o.max_cpu_bytes = (*a)->resident_bytes() + (*b)->resident_bytes();  // both fit, not a third
  AdapterStore store(&Llama().sites(), o);
  ASSERT_GT((*a)->resident_bytes(), (*b)->resident_bytes());
  ASSERT_TRUE(store.Register("a", kAdapters + "llama_mlp_r6").ok());
  ASSERT_TRUE(store.Register("b", kAdapters + "llama_qv_r8_f32").ok());
  EXPECT_EQ(store.num_resident(), 2);
  EXPECT_EQ(store.num_evictions(), 0);
  ASSERT_TRUE(store.Register("c", kAdapters + "llama_qv_r8_f32").ok());  // the size of b
  EXPECT_EQ(store.num_resident(), 2);
  EXPECT_EQ(store.num_evictions(), 1);  // a, the least recently used
  ASSERT_TRUE(store.Acquire("a").ok());  // loaded again, evicting b (c is more recent)
  EXPECT_EQ(store.num_resident(), 2);
  EXPECT_EQ(store.num_evictions(), 2);

  AdapterStoreOptions tiny;
  tiny.max_cpu_bytes = (*a)->resident_bytes() - 1;
  AdapterStore small(&Llama().sites(), tiny);
  Status st = small.Register("a", kAdapters + "llama_mlp_r6");
  EXPECT_EQ(st.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(st.message().find("--max-cpu-lora-memory"), std::string::npos) << st.message();
  EXPECT_FALSE(small.Contains("a"));
}

}  // namespace
}  // namespace loom

namespace loom {
namespace {

// --max-lora-names: every name keeps an entry after its weights are evicted, so the table is
// bounded by names too. A new name past the bound is refused (before its load) unless a name
// found on demand whose weights are not in memory can be forgotten for it; a taken name may
// still be replaced, and an unload makes room.
TEST(AdapterStore, NamesAreBoundedAndOnDemandNamesNotInMemoryMakeRoom) {
  const fs::path root = fs::temp_directory_path() / "loom_store_names";
  fs::remove_all(root);
  fs::create_directories(root);
  fs::copy(kAdapters + "llama_mlp_r6", root / "x", fs::copy_options::recursive);
  fs::copy(kAdapters + "llama_qv_r8_f32", root / "y", fs::copy_options::recursive);
  int loads = 0;
  AdapterStoreOptions o;
  o.max_names = 2;
  o.max_cpu_loras = 1;
  o.lora_dirs = {root.string()};
  o.on_load = [&](const std::string&) { ++loads; };
  AdapterStore store(&Llama().sites(), o);
  ASSERT_TRUE(store.Register("a", kAdapters + "llama_qv_r8_f32").ok());
  ASSERT_TRUE(store.Register("b", kAdapters + "llama_mlp_r6").ok());
  loads = 0;
  Status st = store.Register("c", kAdapters + "llama_all_r4_f16");
  EXPECT_EQ(st.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(st.message().find("--max-lora-names"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("'c'"), std::string::npos) << st.message();
  EXPECT_EQ(loads, 0);  // refused before reading it
  EXPECT_FALSE(store.Contains("c"));
  // Names found on demand count too; both taken names are registered ones: refused.
  EXPECT_EQ(store.Acquire("x").status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(store.List().size(), 2u);
  // A taken name can be replaced at the bound; an unload frees a place.
  EXPECT_TRUE(store.Register("a", kAdapters + "llama_all_r4_f16", "", /*replace=*/true).ok());
  ASSERT_TRUE(store.Unregister("b").ok());
  ASSERT_TRUE(store.Acquire("x").ok());  // on demand: a and x now; x in memory, a evicted
  EXPECT_EQ(store.Acquire("y").status().code(), StatusCode::kResourceExhausted);  // x in memory
  ASSERT_TRUE(store.Acquire("a").ok());  // a back in memory, x evicted: x may be forgotten
  ASSERT_TRUE(store.Acquire("y").ok());
  auto list = store.List();
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list[0].name, "a");
  EXPECT_EQ(list[1].name, "y");
  ASSERT_TRUE(store.Acquire("a").ok());  // y evicted
  ASSERT_TRUE(store.Acquire("x").ok());  // found again in its folder, in y's place
  EXPECT_TRUE(store.Contains("x"));
  EXPECT_FALSE(store.Contains("y"));
  fs::remove_all(root);
}

// A name found on demand whose sub-folder is deleted is forgotten when it is next loaded: it
// leaves List (/v1/models) and answers kNotFound as an unknown name. A registered name whose
// folder went stays, answering kFailedPrecondition (unload it or restore its folder).
TEST(AdapterStore, AnOnDemandNameWhoseFolderWentIsForgotten) {
  const fs::path root = fs::temp_directory_path() / "loom_store_gone";
  fs::remove_all(root);
  fs::create_directories(root);
  fs::copy(kAdapters + "llama_mlp_r6", root / "x", fs::copy_options::recursive);
  fs::copy(kAdapters + "llama_qv_r8_f32", root / "y", fs::copy_options::recursive);
  fs::copy(kAdapters + "llama_all_r4_f16", root / "registered", fs::copy_options::recursive);
  AdapterStoreOptions o;
  o.max_cpu_loras = 1;
  o.lora_dirs = {root.string()};
  AdapterStore store(&Llama().sites(), o);
  ASSERT_TRUE(store.Register("r", (root / "registered").string()).ok());
  ASSERT_TRUE(store.Acquire("x").ok());
  ASSERT_TRUE(store.Acquire("y").ok());  // x and r evicted: not in memory
  EXPECT_EQ(store.List().size(), 3u);
  fs::remove_all(root / "x");
  fs::remove_all(root / "registered");
  auto x = store.Acquire("x");
  EXPECT_EQ(x.status().code(), StatusCode::kNotFound) << x.status().ToString();
  EXPECT_FALSE(store.Contains("x"));
  EXPECT_FALSE(store.Knows("x"));
  auto r = store.Acquire("r");
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition) << r.status().ToString();
  EXPECT_TRUE(store.Contains("r"));
  auto list = store.List();
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list[0].name, "r");
  EXPECT_EQ(list[1].name, "y");
  // The folder back: the name is found on demand again.
  fs::copy(kAdapters + "llama_mlp_r6", root / "x", fs::copy_options::recursive);
  EXPECT_TRUE(store.Acquire("x").ok());
  EXPECT_TRUE(store.Contains("x"));
  fs::remove_all(root);
}

// A folder that fails validation is not read again while its files stay as they were: the same
// error comes back without a load (a client naming a broken adapter in a loop re-read it each
// time under the one-load lock, holding every other adapter's load behind it). Changing a file
// makes the next request load it again, and a fixed folder then serves.
TEST(AdapterStore, AnInvalidFolderIsNotReadAgainUntilItsFilesChange) {
  const fs::path root = fs::temp_directory_path() / "loom_store_failed";
  fs::remove_all(root);
  fs::create_directories(root);
  fs::copy(kAdapters + "llama_mlp_r6", root / "bad", fs::copy_options::recursive);
  const fs::path config = root / "bad" / "adapter_config.json";
  const std::string good = ReadTextFile(config.string()).value();
  std::string broken = good;
  const size_t r = broken.find("\"r\"");
  ASSERT_NE(r, std::string::npos);
  broken.replace(r, 3, "\"r\": -1, \"r_was\"");  // r = -1: invalid
  auto write = [&](const std::string& text) {
    FILE* f = std::fopen(config.string().c_str(), "wb");
    ASSERT_NE(f, nullptr);
    ASSERT_EQ(std::fwrite(text.data(), 1, text.size(), f), text.size());
    std::fclose(f);
  };
  write(broken);
  // A folder changed within 2 s gets no fingerprint (a same-size rewrite in the same clock tick
  // would be unseen): read again each time until then.
  const auto written = std::chrono::steady_clock::now();
  int loads = 0;
  AdapterStoreOptions o;
  o.lora_dirs = {root.string()};
  o.on_load = [&](const std::string&) { ++loads; };
  AdapterStore store(&Llama().sites(), o);
  auto first = store.Acquire("bad");
  ASSERT_EQ(first.status().code(), StatusCode::kInvalidArgument) << first.status().ToString();
  EXPECT_EQ(loads, 1);
  if (std::chrono::steady_clock::now() - written < std::chrono::milliseconds(1900)) {
    EXPECT_EQ(store.Acquire("bad").status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(loads, 2);  // racy: not kept
  }
  std::this_thread::sleep_until(written + std::chrono::milliseconds(3100));
  loads = 0;
  first = store.Acquire("bad");
  EXPECT_EQ(loads, 1);  // kept from here
  for (int i = 0; i < 3; ++i) {
    auto again = store.Acquire("bad");
    EXPECT_EQ(again.status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(again.status().message(), first.status().message());
  }
  EXPECT_EQ(loads, 1);  // answered from what the first load found
  // The load endpoint's path (Register) shares it.
  EXPECT_EQ(store.Register("alias", (root / "bad").string()).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(loads, 2);  // another name: its own load
  EXPECT_EQ(store.Register("alias", (root / "bad").string()).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(loads, 2);
  // Fixed on disk: loaded again, and served.
  write(good);
  auto fixed = store.Acquire("bad");
  EXPECT_TRUE(fixed.ok()) << fixed.status().ToString();
  EXPECT_EQ(loads, 3);
  fs::remove_all(root);
}

}  // namespace
}  // namespace loom
