// LoraDirListing: the --lora-dir sub-folder names a request may give, scanned at most once a second.
#include "lora/lora_dir_listing.h"

#include <sys/stat.h>

#include <algorithm>
#include <filesystem>

namespace loom {

namespace fs = std::filesystem;

std::string LoraDirListing::RootStamps() const {
  std::string out;
  for (const auto& root : roots_) {
    struct stat st {};
    if (::stat(root.c_str(), &st) != 0) {
      out += "-;";
      continue;
    }
    out += std::to_string(st.st_ino) + ":" + std::to_string(st.st_mtim.tv_sec) + "." +
           std::to_string(st.st_mtim.tv_nsec) + ";";
  }
  return out;
}

std::vector<std::pair<std::string, std::string>> LoraDirListing::Names() {
  std::lock_guard<std::mutex> lock(mu_);
  const auto now = std::chrono::steady_clock::now();
  const std::string stamps = RootStamps();
  if (scanned_ && stamps == stamps_ && now - scanned_at_ < std::chrono::seconds(1)) return names_;
  std::vector<std::string> names;
  for (const auto& root : roots_) {
    std::error_code ec;
    fs::directory_iterator it(root, fs::directory_options::skip_permission_denied, ec);
    size_t read = 0;
    for (; !ec && it != fs::directory_iterator() && read < 16 * limit_; it.increment(ec), ++read) {
      names.push_back(it->path().filename().string());
    }
  }
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  std::vector<std::pair<std::string, std::string>> accepted;
  for (const auto& name : names) {
    if (accepted.size() >= limit_) break;
    if (std::optional<std::string> dir = accepts_(name)) accepted.emplace_back(name, std::move(*dir));
  }
  names_ = std::move(accepted);
  stamps_ = stamps;
  scanned_at_ = now;
  scanned_ = true;
  return names_;
}

}  // namespace loom
