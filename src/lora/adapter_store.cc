// AdapterStore: registration, on-demand loading (one per name) outside the table lock, LRU
// eviction.
#include "lora/adapter_store.h"

#include <algorithm>
#include <filesystem>
#include <optional>
#include <string_view>

#include "base/file.h"

namespace loom {

namespace fs = std::filesystem;

namespace {
// True when `p` is `root` or inside it (both canonical).
bool Inside(const fs::path& p, const fs::path& root) {
  auto pi = p.begin();
  for (auto ri = root.begin(); ri != root.end(); ++ri, ++pi) {
    if (pi == p.end() || *pi != *ri) return false;
  }
  return true;
}

bool InsideAny(const fs::path& p, const std::vector<std::string>& roots) {
  for (const auto& root : roots) {
    if (Inside(p, root)) return true;
  }
  return false;
}

// The adapter's files, when they are symbolic links, must resolve inside `root` too (the
// folder's own check does not cover them: a link to /etc/passwd was read, and its bytes quoted
// back in the error; a link adapter_model.bin to an existing file outside answered otherwise
// than one to a missing path). adapter_model.bin only matters (and is only checked) when there
// is no adapter_model.safetensors. A link is followed as far as its target exists, so one that
// dangles inside the root is inside and one to a missing path outside is out. `what` names the
// request field in the error.
Status FilesStayInside(const fs::path& dir, const fs::path& root, const std::string& what) {
  for (const char* file :
       {"adapter_config.json", "adapter_model.safetensors", "adapter_model.bin"}) {
    std::error_code ec;
    const fs::path p = dir / file;
    if (std::string_view(file) == "adapter_model.bin" &&
        fs::exists(fs::symlink_status(dir / "adapter_model.safetensors", ec))) {
      continue;
    }
    if (!fs::is_symlink(fs::symlink_status(p, ec))) continue;
    fs::path target = fs::read_symlink(p, ec);
    if (!ec && target.is_relative()) target = dir / target;
    if (!ec) target = fs::weakly_canonical(target, ec);
    if (ec || !Inside(target, root)) {
      return InvalidArgument(what + ": " + file + " is a symbolic link out of the --lora-dir root");
    }
  }
  return OkStatus();
}
}  // namespace

AdapterStore::AdapterStore(const SiteTable* sites, AdapterStoreOptions options)
    : sites_(sites), options_(std::move(options)) {
  for (const auto& d : options_.lora_dirs) {
    std::error_code ec;
    fs::path c = fs::canonical(d, ec);
    if (ec) continue;
    roots_.push_back(c.string());
    fs::path given = fs::absolute(d, ec).lexically_normal();
    if (!given.has_filename()) given = given.parent_path();  // "/a/b/" → "/a/b"
    if (!ec) spelled_roots_.push_back(given.string());
  }
  if (!roots_.empty()) {
    listing_ = std::make_unique<LoraDirListing>(
        roots_,
        [this](const std::string& name) -> std::optional<std::string> {
          StatusOr<ConfinedDir> found = OnDemandDir(name);
          if (!found.ok()) return std::nullopt;
          return found->dir;
        },
        4096);
  }
}

Status AdapterStore::CheckName(const std::string& name) {
  if (ValidName(name)) return OkStatus();
  return InvalidArgument("adapter name '" + name +
                         "' is not valid (letters, digits, '_', '.', '-'; at most 128)");
}

bool AdapterStore::ValidName(const std::string& name) {
  if (name.empty() || name.size() > 128 || name == "." || name == "..") return false;
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '_' || (i > 0 && (c == '.' || c == '-'));
    if (!ok) return false;
  }
  return true;
}

StatusOr<std::shared_ptr<const Adapter>> AdapterStore::Load(const std::string& name,
                                                             const std::string& dir,
                                                             const std::string& root) const {
  if (options_.on_load) options_.on_load(name);
  std::optional<ConfinedOpenScope> confined;
  if (!root.empty()) confined.emplace(root);
  ASSIGN_OR_RETURN(std::shared_ptr<const Adapter> adapter,
                   LoadAdapter(name, dir, *sites_, options_.max_lora_rank));
  NoteAdapterConfig(*adapter, options_.model_dir);
  // One adapter above the whole bound could never be evicted back under it.
  if (options_.max_cpu_bytes > 0 && adapter->resident_bytes() > options_.max_cpu_bytes) {
    return ResourceExhausted("adapter '" + name + "' takes " +
                             std::to_string(adapter->resident_bytes()) +
                             " bytes loaded, more than the adapter memory limit of " +
                             std::to_string(options_.max_cpu_bytes) + " (--max-cpu-lora-memory)");
  }
  return adapter;
}

StatusOr<std::shared_ptr<const Adapter>> AdapterStore::LoadRemembering(
    const std::string& name, const std::string& dir, const std::string& root,
    const std::string& fingerprint) {
  StatusOr<std::shared_ptr<const Adapter>> loaded = Load(name, dir, root);
  if (loaded.ok()) {
    failed_.Forget(name, dir);
  } else {
    failed_.Remember(name, dir, fingerprint, loaded.status());
  }
  return loaded;
}

Status AdapterStore::Register(const std::string& name, const std::string& dir,
                              const std::string& root, bool replace) {
  RETURN_IF_ERROR(CheckName(name));
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    return NotFound("adapter '" + name + "': folder " + dir + " does not exist");
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    const bool taken = entries_.count(name) != 0;
    if (!replace && taken) return InvalidArgument("adapter '" + name + "' is already loaded");
    // Refused before the load (which reads the whole adapter) when the table is full.
    if (!taken) RETURN_IF_ERROR(RoomForNameLocked(name, /*forget=*/false));
  }
  // Load before publishing the name: a bad folder never half-registers, and a replacement that
  // fails leaves the old adapter serving.
  // A folder that failed before, unchanged since: its error, without waiting for other loads.
  const std::string fingerprint = AdapterFolderFingerprint(dir);  // before: a change re-reads
  Status kept;
  if (failed_.Find(name, dir, fingerprint, &kept)) return kept;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (const int busy = LoadThreadsLocked(); LoadThreadsFull(busy)) return Busy(name, busy);
    RETURN_IF_ERROR(RoomToLoadLocked(name, 0));  // before the load, which reads the whole adapter
    ++registering_;
  }
  struct Done {
    AdapterStore* store;
    ~Done() {
      std::lock_guard<std::mutex> lock(store->mu_);
      --store->registering_;
    }
  } done{this};
  // Held until the name is published: an on-demand load of the same name that was waiting
  // publishes after this registration, never before it (then "already loaded" here).
  std::lock_guard<std::mutex> load_lock(load_mu_);
  ASSIGN_OR_RETURN(std::shared_ptr<const Adapter> adapter,
                   LoadRemembering(name, dir, root, fingerprint));
  Dropped dropped;  // freed after the lock below is released
  std::lock_guard<std::mutex> lock(mu_);
  auto old = entries_.find(name);
  if (old != entries_.end() && !replace) {
    return InvalidArgument("adapter '" + name + "' is already loaded");
  }
  // Again, now that its size is known: requests may have taken the other adapters meanwhile.
  RETURN_IF_ERROR(RoomToLoadLocked(name, adapter->resident_bytes()));
  if (old != entries_.end()) {
    // The old entry goes as Unregister takes it; its new generation supersedes any load of the
    // old folder still in flight.
    RetireLocked(old->second, &dropped);
    entries_.erase(old);
  } else {
    // Again: names found on demand may have filled the table while this one loaded.
    RETURN_IF_ERROR(RoomForNameLocked(name, /*forget=*/true));
  }
  Entry& e = entries_[name];
  e.dir = dir;
  e.root = root;
  e.generation = next_generation_++;
  Publish(name, e, std::move(adapter), &dropped);
  return OkStatus();
}

bool AdapterStore::FullLocked() const {
  return options_.max_names > 0 && entries_.size() >= static_cast<size_t>(options_.max_names);
}

// A name found on demand whose weights are not in memory costs nothing to forget: its folder
// still answers to it (and lists it again once used). One in flight is being reloaded: kept.
AdapterStore::Table::const_iterator AdapterStore::ForgettableLocked() const {
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    const Entry& e = it->second;
    if (e.on_demand && !e.loaded && flights_.count(it->first) == 0) return it;
  }
  return entries_.end();
}

Status AdapterStore::RoomForNameLocked(const std::string& name, bool forget) {
  if (!FullLocked()) return OkStatus();
  if (auto it = ForgettableLocked(); it != entries_.end()) {
    if (forget) entries_.erase(it);
    return OkStatus();
  }
  return ResourceExhausted("adapter '" + name + "' cannot be added: the server holds " +
                           std::to_string(entries_.size()) + " adapter names, its limit " +
                           "(--max-lora-names); unload one first");
}

void AdapterStore::Touch(const std::string& name, Entry& e) {
  lru_.erase(e.lru);
  lru_.push_front(name);
  e.lru = lru_.begin();
}

void AdapterStore::DropLocked(std::shared_ptr<const Adapter>& adapter, Dropped* dropped) noexcept {
  try {
    dropped->push_back(std::move(adapter));  // on a throw nothing moved: freed below
  } catch (...) {
  }
  adapter.reset();
}

void AdapterStore::RetireLocked(Entry& e, Dropped* dropped) {
  if (!e.loaded) return;
  lru_.erase(e.lru);
  resident_bytes_ -= e.loaded->resident_bytes();
  if (e.loaded.use_count() > 1) {  // held by sequences besides this entry
    retired_.push_back(e.loaded);
    retired_bytes_ += e.loaded->resident_bytes();
  }
  DropLocked(e.loaded, dropped);
}

void AdapterStore::PruneRetiredLocked() {
  if (retired_.empty()) return;
  retired_bytes_ = 0;
  size_t kept = 0;
  for (size_t i = 0; i < retired_.size(); ++i) {
    if (auto a = retired_[i].lock()) {
      retired_bytes_ += a->resident_bytes();
      if (kept != i) retired_[kept] = std::move(retired_[i]);  // a self-move would empty it
      ++kept;
    }
  }
  retired_.resize(kept);
}

void AdapterStore::EvictLocked(Dropped* dropped) {
  PruneRetiredLocked();
  // The running totals: a scan of the list per victim was quadratic, on the engine thread.
  auto over = [&] {
    return (options_.max_cpu_loras > 0 &&
            lru_.size() + retired_.size() > static_cast<size_t>(options_.max_cpu_loras)) ||
           (options_.max_cpu_bytes > 0 && resident_bytes_ + retired_bytes_ > options_.max_cpu_bytes);
  };
  // Oldest first; an adapter some sequence holds (use_count > 1) is pinned. The most recent
  // one (just loaded or acquired) is never evicted. A load is refused when no room can be made
  // for it (RoomToLoadLocked), so the adapters held stay within the bounds and this gets back
  // to them.
  for (auto it = lru_.end(); it != lru_.begin() && over();) {
    --it;
    if (it == lru_.begin()) break;
    Entry& e = entries_.at(*it);
    if (e.loaded.use_count() > 1) continue;
    resident_bytes_ -= e.loaded->resident_bytes();
    DropLocked(e.loaded, dropped);
    it = lru_.erase(it);
    ++evictions_;
  }
}

Status AdapterStore::RoomToLoadLocked(const std::string& name, uint64_t bytes) {
  if (options_.max_cpu_loras <= 0 && options_.max_cpu_bytes == 0) return OkStatus();
  PruneRetiredLocked();
  // What eviction cannot take: adapters that requests hold (each waiting sequence holds one),
  // loaded or unloaded and still in use. Without this check every request naming another
  // adapter loaded one more past the bound while all were held.
  size_t held = retired_.size();
  uint64_t held_bytes = retired_bytes_;
  for (const std::string& n : lru_) {
    const Entry& e = entries_.at(n);
    if (e.loaded.use_count() > 1) {
      ++held;
      held_bytes += e.loaded->resident_bytes();
    }
  }
  const size_t most = static_cast<size_t>(options_.max_cpu_loras) +
                      static_cast<size_t>(std::max(0, options_.max_cpu_overshoot));
  if (options_.max_cpu_loras > 0 && held >= most) {
    return Unavailable(
        "adapter '" + name + "' cannot be loaded: the " + std::to_string(held) +
        " adapters in memory (--max-cpu-loras " + std::to_string(options_.max_cpu_loras) +
        (options_.max_cpu_overshoot > 0 ? ", and " + std::to_string(options_.max_cpu_overshoot) +
                                              " more (--max-loras) while requests hold them"
                                        : std::string()) +
        ") are all in use by requests; retry later");
  }
  // Before the load its size is unknown (0): there must be room for at least a byte.
  if (options_.max_cpu_bytes > 0 &&
      held_bytes + std::max<uint64_t>(bytes, 1) > options_.max_cpu_bytes) {
    return Unavailable("adapter '" + name + "'" +
                       (bytes > 0 ? " (" + std::to_string(bytes) + " bytes loaded)" : "") +
                       " cannot be loaded: adapters in use by requests hold " +
                       std::to_string(held_bytes) + " of the " +
                       std::to_string(options_.max_cpu_bytes) +
                       " bytes of --max-cpu-lora-memory; retry later");
  }
  return OkStatus();
}

StatusOr<ConfinedDir> AdapterStore::OnDemandDir(const std::string& name) const {
  if (!ValidName(name)) return NotFound("no adapter named '" + name + "'");
  for (const auto& root : roots_) {
    std::error_code ec;
    const fs::path candidate = fs::path(root) / name;
    if (!fs::exists(candidate, ec)) continue;
    fs::path c = fs::canonical(candidate, ec);
    if (ec || !Inside(c, root) || !fs::is_directory(c, ec)) continue;
    if (!fs::exists(c / "adapter_config.json", ec)) continue;
    RETURN_IF_ERROR(FilesStayInside(c, root, "adapter '" + name + "'"));
    return ConfinedDir{c.string(), root};
  }
  return NotFound("no adapter named '" + name + "'");
}

int AdapterStore::LoadThreadsLocked() const {
  return waiting_for_flights_ + static_cast<int>(flights_.size()) + registering_;
}

bool AdapterStore::LoadThreadsFull(int busy) const {
  return options_.max_load_threads > 0 && busy >= options_.max_load_threads;
}

Status AdapterStore::Busy(const std::string& name, int busy) const {
  return Unavailable("adapter '" + name + "' is not loaded, and " + std::to_string(busy) +
                     " requests are loading adapters or waiting for a load (at most " +
                     std::to_string(options_.max_load_threads) + " at once); retry");
}

Status AdapterStore::RefuseBusy(const std::string& name, std::string dir, int busy) {
  // The answers that need no load come first: an unknown name is 404 and a folder whose
  // failure is remembered gets its error, busy or not (a client told to retry a name that
  // does not exist would retry it for ever).
  if (dir.empty()) {
    ASSIGN_OR_RETURN(ConfinedDir found, OnDemandDir(name));
    dir = std::move(found.dir);
  }
  Status kept;
  if (failed_.Find(name, dir, AdapterFolderFingerprint(dir), &kept)) return kept;
  return Busy(name, busy);
}

StatusOr<std::shared_ptr<const Adapter>> AdapterStore::Acquire(const std::string& name) {
  // A load superseded by an unload or a replacement is not this request's answer: look again
  // (bounded: each retry follows another client's unload or replacement of the same name).
  for (int attempt = 0;; ++attempt) {
    bool superseded = false;
    auto result = AcquireOnce(name, &superseded);
    if (!superseded || attempt == 3) return result;
  }
}

StatusOr<std::shared_ptr<const Adapter>> AdapterStore::AcquireOnce(const std::string& name,
                                                                   bool* superseded) {
  std::shared_ptr<Flight> flight;
  std::string dir;
  std::string root;
  uint64_t generation = 0;
  bool on_demand = false;
  Dropped dropped;  // freed after the lock below is released
  {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      auto it = entries_.find(name);
      if (it != entries_.end() && it->second.loaded) {
        Touch(name, it->second);
        std::shared_ptr<const Adapter> lease = it->second.loaded;
        // Back to the bounds should the store be past them (the one just acquired is the most
        // recent, never a victim).
        EvictLocked(&dropped);
        return lease;
      }
      if (it == entries_.end() && roots_.empty()) {
        return NotFound("no adapter named '" + name + "'");
      }
      // One load per name: requests that name an adapter being loaded wait for that load and
      // share its result, success or error (16 requests for a slow or failing adapter each ran
      // the whole load again, one after another, holding 16 handler threads for seconds).
      if (const int busy = LoadThreadsLocked(); LoadThreadsFull(busy)) {
        const std::string dir_known = it == entries_.end() ? "" : it->second.dir;
        lock.unlock();
        return RefuseBusy(name, dir_known, busy);
      }
      auto f = flights_.find(name);
      if (f == flights_.end()) break;
      std::shared_ptr<Flight> theirs = f->second;
      ++waiting_for_flights_;
      flight_done_.wait(lock, [&] { return theirs->done; });
      --waiting_for_flights_;
      // That load's name was unloaded meanwhile: its result is not this request's (the name
      // may be a --lora-dir sub-folder now): look again.
      if (theirs->superseded) continue;
      if (!theirs->result.ok()) return theirs->result.status();
      auto e = entries_.find(name);
      if (e != entries_.end() && e->second.loaded == *theirs->result) Touch(name, e->second);
      return theirs->result;
    }
    // Everything that may throw (the copies, the allocations) comes before the flight is in
    // flights_: from there until `land` below owns it nothing may throw, or the flight would
    // stay and every later Acquire(name) would wait for it for ever.
    auto it = entries_.find(name);
    if (it != entries_.end()) {
      dir = it->second.dir;
      root = it->second.root;
      generation = it->second.generation;
      on_demand = it->second.on_demand;
    }
    flight = std::make_shared<Flight>();
    flights_[name] = flight;  // on a throw, nothing is inserted
  }
  // Whatever happens (an error, an exception of any type), the flight ends and its waiters wake.
  struct Land {
    AdapterStore* store;
    const std::string& name;
    Flight& flight;
    ~Land() {
      {
        std::lock_guard<std::mutex> lock(store->mu_);
        flight.done = true;
        store->flights_.erase(name);
      }
      store->flight_done_.notify_all();
    }
  } land{this, name, *flight};
  bool changed_hands = false;
  StatusOr<std::shared_ptr<const Adapter>> result =
      LoadAndPublish(name, dir, root, generation, on_demand, &changed_hands);
  std::lock_guard<std::mutex> lock(mu_);
  flight->result = result;
  flight->superseded = changed_hands;
  *superseded = flight->superseded;
  return result;
}

StatusOr<std::shared_ptr<const Adapter>> AdapterStore::LoadAndPublish(const std::string& name,
                                                                      std::string dir,
                                                                      std::string root,
                                                                      uint64_t generation,
                                                                      bool on_demand,
                                                                      bool* superseded) {
  if (dir.empty()) {  // an unknown name is answered without waiting for other loads
    ASSIGN_OR_RETURN(ConfinedDir found, OnDemandDir(name));
    dir = std::move(found.dir);
    root = std::move(found.root);
    std::lock_guard<std::mutex> lock(mu_);  // a full table refuses it before the load
    if (entries_.count(name) == 0) RETURN_IF_ERROR(RoomForNameLocked(name, /*forget=*/false));
  }
  const std::string fingerprint = AdapterFolderFingerprint(dir);  // before: a change re-reads
  Status kept;
  StatusOr<std::shared_ptr<const Adapter>> loaded = Internal("");
  if (failed_.Find(name, dir, fingerprint, &kept)) {
    loaded = kept;  // failed before, unchanged since: not read again, nor waited for
  } else {
    {
      std::lock_guard<std::mutex> lock(mu_);  // refused before the load (and its wait)
      RETURN_IF_ERROR(RoomToLoadLocked(name, 0));
    }
    std::lock_guard<std::mutex> load_lock(load_mu_);  // one load at a time (memory, CPU)
    loaded = LoadRemembering(name, dir, root, fingerprint);
  }
  if (!loaded.ok() && on_demand) {
    // A name found on demand whose sub-folder (or its adapter_config.json) has gone since: the
    // name is forgotten, as if never used (it stayed in /v1/models, answering 400, forever).
    // When another root's sub-folder answers to the name now, that one is loaded instead.
    StatusOr<ConfinedDir> now = OnDemandDir(name);
    const bool gone = !now.ok() && now.status().code() == StatusCode::kNotFound;
    if (gone || (now.ok() && now->dir != dir)) {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = entries_.find(name);
      if (it != entries_.end() && it->second.generation == generation && !it->second.loaded) {
        entries_.erase(it);
      }
      *superseded = !gone;  // Acquire looks again: the name is a fresh on-demand one
      return NotFound("no adapter named '" + name + "'");
    }
  }
  if (!loaded.ok() && generation != 0 && loaded.status().code() == StatusCode::kNotFound) {
    // A registered (listed) adapter whose folder went away after an eviction: not "no such
    // model", which /v1/models would contradict.
    return FailedPrecondition("adapter '" + name + "' is registered, but reloading it failed: " +
                              loaded.status().message() + "; unload it or restore its folder");
  }
  if (!loaded.ok() && loaded.status().code() == StatusCode::kNotFound) {
    // The folder was found (it has an adapter_config.json) but a file it needs is not there:
    // a broken adapter (400), not "no such model" (404, which /tokenize, finding the folder,
    // would contradict).
    return InvalidArgument(loaded.status().message());
  }
  if (!loaded.ok()) return loaded.status();
  std::shared_ptr<const Adapter> adapter = std::move(loaded).value();
  Dropped dropped;  // freed after the lock below is released
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(name);
  if (generation != 0 && (it == entries_.end() || it->second.generation != generation)) {
    *superseded = true;
    return NotFound("adapter '" + name + "' was unloaded or replaced while it loaded");
  }
  if (generation == 0 && it != entries_.end() && !it->second.loaded && it->second.dir != dir) {
    // Loaded on demand from its --lora-dir sub-folder while /v1/load_lora_adapter registered
    // the name from another folder (since evicted): these weights are not the name's; its own
    // folder is loaded on the next attempt. (Published, they served under the registered name
    // until its next eviction.)
    *superseded = true;
    return NotFound("adapter '" + name + "' was registered from another folder while it loaded");
  }
  if (it != entries_.end() && it->second.loaded) {
    Touch(name, it->second);
    return it->second.loaded;
  }
  // Again, now that its size is known: requests may have taken the other adapters meanwhile.
  RETURN_IF_ERROR(RoomToLoadLocked(name, adapter->resident_bytes()));
  if (it == entries_.end()) {
    RETURN_IF_ERROR(RoomForNameLocked(name, /*forget=*/true));
    it = entries_.emplace(name, Entry{}).first;
    it->second.dir = dir;
    it->second.root = root;
    it->second.generation = next_generation_++;
    it->second.on_demand = true;
  }
  Publish(name, it->second, std::move(adapter), &dropped);
  return it->second.loaded;
}

void AdapterStore::Publish(const std::string& name, Entry& e,
                           std::shared_ptr<const Adapter> adapter, Dropped* dropped) {
  resident_bytes_ += adapter->resident_bytes();
  e.loaded = std::move(adapter);
  lru_.push_front(name);
  e.lru = lru_.begin();
  ++loads_;
  EvictLocked(dropped);
}

void AdapterStore::Trim() {
  Dropped dropped;  // freed after the lock below is released
  std::lock_guard<std::mutex> lock(mu_);
  EvictLocked(&dropped);
}

Status AdapterStore::Unregister(const std::string& name) {
  Dropped dropped;  // freed after the lock below is released
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(name);
  if (it == entries_.end()) return NotFound("adapter '" + name + "' is not loaded");
  RetireLocked(it->second, &dropped);
  entries_.erase(it);
  return OkStatus();
}

bool AdapterStore::Contains(const std::string& name) const {
  std::lock_guard<std::mutex> lock(mu_);
  return entries_.count(name) != 0;
}

bool AdapterStore::Knows(const std::string& name) const {
  return Contains(name) || OnDemandDir(name).ok();
}

std::vector<AdapterInfo> AdapterStore::List() const { return Listed(/*sub_folders=*/false); }

std::vector<AdapterInfo> AdapterStore::ListNameable() const { return Listed(/*sub_folders=*/true); }

std::vector<AdapterInfo> AdapterStore::Listed(bool sub_folders) const {
  std::vector<std::pair<std::string, std::string>> found;
  if (sub_folders && listing_) found = listing_->Names();  // the roots read with no lock held
  std::vector<AdapterInfo> out;
  {  // the table and the filter in one look: a name unloaded in between is listed once
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [name, e] : entries_) out.push_back({name, e.dir, e.loaded != nullptr});
    if (!FullLocked() || ForgettableLocked() != entries_.end()) {  // else none could be named
      for (const auto& [name, dir] : found) {
        if (entries_.count(name) == 0) out.push_back({name, dir, false});
      }
    }
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  return out;
}

StatusOr<ConfinedDir> AdapterStore::ResolveRuntimePath(const std::string& path) const {
  if (roots_.empty()) {
    return InvalidArgument("lora_path: runtime loading needs --lora-dir; the server has none");
  }
  if (path.empty()) return InvalidArgument("lora_path is empty");
  // The filesystem would read a path only up to a NUL: another folder than the one sent.
  if (path.find('\0') != std::string::npos) return InvalidArgument("lora_path contains a NUL byte");
  for (const auto& part : fs::path(path)) {
    if (part == "..") return InvalidArgument("lora_path '" + path + "' contains '..'");
  }
  std::vector<fs::path> candidates;
  if (fs::path(path).is_absolute()) {
    // Not under a root as written (the canonical one or as --lora-dir spelled it): refused
    // before the filesystem is asked, so the answer cannot tell whether the path exists.
    const fs::path lexical = fs::path(path).lexically_normal();
    if (!InsideAny(lexical, roots_) && !InsideAny(lexical, spelled_roots_)) {
      return InvalidArgument("lora_path '" + path + "' is outside the --lora-dir roots");
    }
    candidates.push_back(path);
  } else {
    for (const auto& root : roots_) candidates.push_back(fs::path(root) / path);
  }
  bool exists_somewhere = false;
  bool leads_outside = false;  // a missing path whose existing part resolves out of the roots
  for (const auto& candidate : candidates) {
    std::error_code ec;
    fs::path c = fs::canonical(candidate, ec);
    if (ec) {
      // Through a symlink inside a root to a missing file outside: 400 as if it existed (a 404
      // there told whether files outside the roots exist).
      std::error_code wec;
      const fs::path w = fs::weakly_canonical(candidate, wec);
      leads_outside = leads_outside || wec || !InsideAny(w, roots_);
      continue;
    }
    exists_somewhere = true;
    for (const auto& root : roots_) {
      if (Inside(c, root) && c != fs::path(root)) {
        if (!fs::is_directory(c, ec)) {
          return InvalidArgument("lora_path '" + path + "' is not a folder");
        }
        RETURN_IF_ERROR(FilesStayInside(c, root, "lora_path '" + path + "'"));
        return ConfinedDir{c.string(), root};
      }
    }
  }
  if (!exists_somewhere && !leads_outside) {
    return NotFound("lora_path '" + path + "' does not exist");
  }
  return InvalidArgument("lora_path '" + path + "' is outside the --lora-dir roots");
}

size_t AdapterStore::num_names() const {
  std::lock_guard<std::mutex> lock(mu_);
  return entries_.size();
}

int64_t AdapterStore::num_loads() const {
  std::lock_guard<std::mutex> lock(mu_);
  return loads_;
}
int AdapterStore::num_waiting_for_loads() const {
  std::lock_guard<std::mutex> lock(mu_);
  return waiting_for_flights_;
}
int64_t AdapterStore::num_evictions() const {
  std::lock_guard<std::mutex> lock(mu_);
  return evictions_;
}
int AdapterStore::num_resident() const {
  std::lock_guard<std::mutex> lock(mu_);
  size_t retired = 0;  // unloaded or replaced, still in use
  for (const auto& w : retired_) retired += w.expired() ? 0 : 1;
  return static_cast<int>(lru_.size() + retired);
}

}  // namespace loom
