// LoraDirListing: the --lora-dir sub-folder names a request may give, scanned at most once a second.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace loom {

// /v1/models lists "every adapter that can be named" (SPEC-api): besides the store's table, the
// sub-folders of the --lora-dir roots a request would load on demand. Reading the roots for each
// call would cost a readdir and a few stats per sub-folder (tens of ms at 10,000 of them), so the
// names are kept and read again when a second has passed or a root's modification time changed
// (a sub-folder added, removed or renamed). Thread-safe: one caller scans, the others wait for it.
class LoraDirListing {
 public:
  // `accepts`: the folder a sub-folder name would load from on demand (AdapterStore::OnDemandDir),
  // or nothing.
  using Accepts = std::function<std::optional<std::string>(const std::string& name)>;
  LoraDirListing(std::vector<std::string> roots, Accepts accepts, size_t limit)
      : roots_(std::move(roots)), accepts_(std::move(accepts)), limit_(limit) {}
  // The accepted (name, folder)s, sorted by name, each name once (in two roots, the first
  // root's), at most `limit`; a root's entries past 16 × limit are not read (the scan's bound).
  std::vector<std::pair<std::string, std::string>> Names();

 private:
  std::string RootStamps() const;  // the roots' modification times
  const std::vector<std::string> roots_;
  const Accepts accepts_;
  const size_t limit_;
  std::mutex mu_;
  bool scanned_ = false;
  std::chrono::steady_clock::time_point scanned_at_;
  std::string stamps_;
  std::vector<std::pair<std::string, std::string>> names_;
};

}  // namespace loom
