// AdapterStore: adapter names → folders and loaded adapters; an LRU of loaded ones with leases.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "lora/adapter.h"
#include "lora/failed_loads.h"
#include "lora/lora_dir_listing.h"
#include "lora/site_table.h"

namespace loom {

struct AdapterStoreOptions {
  int max_cpu_loras = 0;         // adapters kept loaded; 0 = no limit
  // Adapters past max_cpu_loras that requests may hold (loads are refused only beyond it;
  // evicted back to max_cpu_loras as their requests end): `loom serve` gives --max-loras, what
  // one step can run, so that requests for one busy adapter cannot starve every other adapter
  // at --max-cpu-loras 1.
  int max_cpu_overshoot = 0;
  uint64_t max_cpu_bytes = 0;    // Adapter::resident_bytes of those kept loaded; 0 = no limit
  int max_lora_rank = 0;         // 0 = no limit
  // Names in the table, registered and on demand together (--max-lora-names): each keeps an
  // entry (and a /v1/models line) after its weights are evicted, so a client loading a new name
  // each time grew the table, and every /v1/models copy of it, without end. 0 = no limit.
  int max_names = 0;
  // Requests loading an adapter or waiting for a load (Acquire, and Register's load endpoint),
  // all names together; one more is refused at once (kUnavailable: a 503 with Retry-After),
  // unless its answer needs no load (an unknown name, a remembered failure). Each holds an HTTP
  // handler thread meanwhile, and loads run one at a time, so requests naming N new adapters
  // held N threads for N loads: with all of them held, no other request was handled. 0 = none.
  int max_load_threads = 0;
  std::vector<std::string> lora_dirs;  // roots for on-demand names and runtime paths
  std::string model_dir;  // the served model's folder: NoteAdapterConfig compares with it
  // Called on the loading thread before each load from disk (an observer: tests, logging).
  std::function<void(const std::string& name)> on_load;
};

// A folder inside a --lora-dir root, and that root (every file of the adapter is opened inside it).
struct ConfinedDir {
  std::string dir;
  std::string root;
};

struct AdapterInfo {
  std::string name;
  std::string dir;
  bool loaded = false;
};

// Identity is the loaded Adapter's content hash, never the name. A lease is a shared_ptr to
// the Adapter: while any sequence holds one the adapter is "leased"; eviction takes only
// unleased adapters (the store holds the last reference), and an evicted adapter is loaded
// again from its folder when next named. Unregister removes the name at once; sequences that
// hold a lease finish on those weights.
// Thread-safety: every method may be called from any thread. Loading (file reads, validation)
// happens on the calling thread, never under the table lock, one load at a time; callers that
// name an adapter already being loaded wait for that load and share its result.
class AdapterStore {
 public:
  // `sites`: the served model's projections (Model::sites()); outlives the store.
  AdapterStore(const SiteTable* sites, AdapterStoreOptions options);

  // Registers `name` → `dir` and loads it (so a bad folder fails here, whole). kInvalidArgument
  // when the name is taken or invalid, kNotFound when the folder does not exist,
  // kResourceExhausted when the adapter alone holds more than max_cpu_bytes, or when the name is
  // new and the table is full (max_names; see Acquire). `root` (a --lora-dir root, for runtime
  // paths): the adapter's files, now and on every reload, are opened only inside it
  // (ConfinedOpenScope), whatever is swapped under it meanwhile. With `replace`
  // (vLLM's load_inplace) a taken name is given the new folder's adapter once it has loaded (a
  // new identity; sequences holding the old one finish on it; a failed load keeps the old one).
  // kUnavailable when requests hold every adapter in memory and no room can be made under
  // max_cpu_loras / max_cpu_bytes (checked before the load and again before publishing); never
  // before serving (start-up --lora adapters): with nothing held, eviction always makes room.
  Status Register(const std::string& name, const std::string& dir, const std::string& root = "",
                  bool replace = false);
  // The adapter for `name`, loading it if needed (also on demand from a --lora-dir root when
  // the name is a sub-folder there). kNotFound for an unknown name, and for a name found on
  // demand whose sub-folder has gone when it is next loaded (the name is forgotten then).
  // A new name that would pass max_names first takes the place of a name found on demand whose
  // weights are not in memory (it is found again in its folder when next named); with none,
  // kResourceExhausted. A name whose adapter must be loaded while requests hold every adapter
  // in memory, with no room under max_cpu_loras / max_cpu_bytes: kUnavailable (as Register);
  // one in memory is always given.
  StatusOr<std::shared_ptr<const Adapter>> Acquire(const std::string& name);
  // Evicts unleased adapters until the store is back under its bounds (after leases ended).
  void Trim();
  // Removes the name; kNotFound when unknown.
  Status Unregister(const std::string& name);
  bool Contains(const std::string& name) const;
  // Whether Acquire(name) would find the name — registered, or a --lora-dir sub-folder with an
  // adapter_config.json — without loading anything (for routes that need no weights).
  bool Knows(const std::string& name) const;
  // Registered names and those found on demand, sorted (copied under the table lock, sorted
  // outside it: /v1/models runs on the I/O thread).
  std::vector<AdapterInfo> List() const;
  // Every name a request may give now (SPEC-api's /v1/models): List(), then the --lora-dir
  // sub-folders that would load on demand and are not in the table (loaded = false; at most
  // 4,096, the roots read at most once a second: LoraDirListing) — none while the table is full
  // (--max-lora-names) with no name it could forget for them. Sorted by name. Not under the
  // table lock while the roots are read: call it off the I/O thread when has_roots().
  std::vector<AdapterInfo> ListNameable() const;
  bool has_roots() const { return !roots_.empty(); }
  // A runtime path (load endpoint) resolved inside one of the lora_dirs roots: symlinks
  // resolved, `..` refused, must be a directory. kInvalidArgument outside the roots,
  // kNotFound when it does not exist.
  StatusOr<ConfinedDir> ResolveRuntimePath(const std::string& path) const;
  // A valid adapter name: [A-Za-z0-9_][A-Za-z0-9._-]{0,127}, not "." or "..".
  static bool ValidName(const std::string& name);
  // ValidName as a Status: the error every path that names an adapter gives for a bad name.
  static Status CheckName(const std::string& name);

  // Names in the table (registered and found on demand): what List() would return, counted.
  size_t num_names() const;
  int64_t num_loads() const;
  // Requests waiting now for another request's load of the same name (to share its result).
  int num_waiting_for_loads() const;
  int64_t num_evictions() const;
  // Adapters in memory: the loaded ones, and those unloaded or replaced that sequences still use.
  int num_resident() const;
  int max_cpu_loras() const { return options_.max_cpu_loras; }

 private:
  struct Entry {
    std::string dir;
    std::string root;                       // non-empty: opened only inside this --lora-dir root
    std::shared_ptr<const Adapter> loaded;  // null when not resident
    uint64_t generation = 0;                // bumps on every (re)registration
    bool on_demand = false;                 // found in a --lora-dir root, not registered
    std::list<std::string>::iterator lru;   // valid when loaded
  };
  using Table = std::unordered_map<std::string, Entry>;
  // One load in progress for a name; later requests for it wait on flight_done_ and share it.
  struct Flight {
    bool done = false;
    bool superseded = false;  // the name was unloaded while it loaded: waiters look again
    StatusOr<std::shared_ptr<const Adapter>> result = Internal("the load ended without a result");
  };
  // One Acquire attempt; *superseded when the name was unloaded or replaced while this attempt
  // loaded it (Acquire then looks again).
  StatusOr<std::shared_ptr<const Adapter>> AcquireOnce(const std::string& name, bool* superseded);
  // Threads loading adapters or waiting for a load (flights' loaders and waiters, Register
  // calls); whether `busy` of them is the max_load_threads cap; the 503 past it.
  int LoadThreadsLocked() const;
  bool LoadThreadsFull(int busy) const;
  Status Busy(const std::string& name, int busy) const;
  // Acquire past the cap (mu_ not held): 404 for an unknown name and a remembered failure's
  // error as without the cap, else Busy. `dir`: the name's folder when it is in the table.
  Status RefuseBusy(const std::string& name, std::string dir, int busy);
  // Acquire's loader: finds the folder (on demand), loads it (one load at a time), publishes.
  // *superseded when the name changed hands while it loaded (unloaded, replaced, or registered
  // from another folder): what it loaded is not the name's, and nothing was published.
  // `on_demand`: the entry (generation != 0) was found in a --lora-dir root, not registered.
  StatusOr<std::shared_ptr<const Adapter>> LoadAndPublish(const std::string& name, std::string dir,
                                                          std::string root, uint64_t generation,
                                                          bool on_demand, bool* superseded);
  // Room for one more name under max_names, for new name `name`: OK when there is room, or
  // (with `forget`) after dropping a name found on demand whose weights are not in memory and
  // that no load is using; else kResourceExhausted naming the flag. Under mu_.
  Status RoomForNameLocked(const std::string& name, bool forget);
  bool FullLocked() const;  // the table holds --max-lora-names names
  // List() (`sub_folders` false) and ListNameable() (true).
  std::vector<AdapterInfo> Listed(bool sub_folders) const;
  Table::const_iterator ForgettableLocked() const;  // an entry a new name may replace, or end()
  // The store's references to adapters it let go of under mu_ (evicted, unloaded, replaced):
  // each public method declares one before taking mu_, so that the last reference to an adapter
  // (hundreds of MB) is dropped after mu_ is released, not while /metrics on the I/O thread and
  // the engine's Trim wait for the lock.
  using Dropped = std::vector<std::shared_ptr<const Adapter>>;
  // Moves `adapter` into *dropped (or, when that cannot allocate, releases it here).
  static void DropLocked(std::shared_ptr<const Adapter>& adapter, Dropped* dropped) noexcept;
  // Makes `adapter` the resident one of `e` (the most recent), then evicts to the bounds.
  void Publish(const std::string& name, Entry& e, std::shared_ptr<const Adapter> adapter,
               Dropped* dropped);
  // LoadAdapter, with every file opened inside `root` when it is not empty.
  StatusOr<std::shared_ptr<const Adapter>> Load(const std::string& name, const std::string& dir,
                                                const std::string& root) const;
  // Load, its failure kept in failed_ under `fingerprint` (taken before it; a success forgets
  // one). The caller holds load_mu_ and has asked failed_ first.
  StatusOr<std::shared_ptr<const Adapter>> LoadRemembering(const std::string& name,
                                                           const std::string& dir,
                                                           const std::string& root,
                                                           const std::string& fingerprint);
  void Touch(const std::string& name, Entry& e);
  void EvictLocked(Dropped* dropped);
  // kUnavailable (a 503 with Retry-After) naming `name` and the flag when no room can be made
  // for one more adapter of `bytes` resident bytes (0 before its load: unknown): with every
  // adapter no request holds evicted, the store would still be past --max-cpu-loras or
  // --max-cpu-lora-memory. Under mu_.
  Status RoomToLoadLocked(const std::string& name, uint64_t bytes);
  // Takes a loaded adapter out of the table (unload, replace): its bytes leave the resident
  // total; if sequences still hold it, it joins retired_ and still counts against the bounds.
  void RetireLocked(Entry& e, Dropped* dropped);
  // Drops retired adapters no sequence holds any more; their count and bytes are what is left.
  void PruneRetiredLocked();
  StatusOr<ConfinedDir> OnDemandDir(const std::string& name) const;

  const SiteTable* sites_;
  AdapterStoreOptions options_;
  std::vector<std::string> roots_;  // canonical lora_dirs
  std::vector<std::string> spelled_roots_;  // the lora_dirs as given, absolute, lexically normal
  mutable std::mutex mu_;           // the table
  std::mutex load_mu_;              // one load at a time
  FailedLoads failed_;              // invalid folders' errors, until their files change
  std::unique_ptr<LoraDirListing> listing_;  // the roots' sub-folders (ListNameable)
  Table entries_;
  std::list<std::string> lru_;      // loaded names, most recent first
  uint64_t resident_bytes_ = 0;     // Adapter::resident_bytes of the loaded ones
  // Unloaded or replaced while sequences ran on them: in memory until those end, so counted
  // against --max-cpu-loras / --max-cpu-lora-memory (each unload + load of a large adapter under
  // traffic left one more copy alive that the bounds did not see).
  std::vector<std::weak_ptr<const Adapter>> retired_;
  uint64_t retired_bytes_ = 0;  // theirs, as of the last prune
  std::unordered_map<std::string, std::shared_ptr<Flight>> flights_;  // under mu_
  std::condition_variable flight_done_;                               // with mu_
  int waiting_for_flights_ = 0;                                       // under mu_
  int registering_ = 0;  // under mu_: Register calls past their checks, loading or waiting to
  uint64_t next_generation_ = 1;
  int64_t loads_ = 0;
  int64_t evictions_ = 0;
};

}  // namespace loom
