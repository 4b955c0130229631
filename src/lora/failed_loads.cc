// FailedLoads: the kept errors of invalid adapter folders, keyed by name and folder, and the
// stat(2) fingerprint that says when a folder must be read again.
#include "lora/failed_loads.h"

#include <sys/stat.h>
#include <time.h>

#include <cstdio>

namespace loom {

std::string AdapterFolderFingerprint(const std::string& dir) {
  // git's "racy" rule: a file changed within the last 2 s may change again within the same
  // timestamp tick (coarse kernel clock) with the same size, unseen by any stat field: such a
  // folder gets no fingerprint, and its failure is not kept.
  struct timespec now {};
  ::clock_gettime(CLOCK_REALTIME, &now);
  const long long racy_after = static_cast<long long>(now.tv_sec) - 2;
  std::string out;
  // The folder (an entry added or removed) and every file LoadAdapter reads or looks for.
  for (const char* entry : {"", "/adapter_config.json", "/adapter_model.safetensors",
                            "/adapter_model.bin"}) {
    struct stat st {};
    char line[160];
    if (::stat((dir + entry).c_str(), &st) != 0) {
      std::snprintf(line, sizeof(line), "-;");
    } else {
      if (static_cast<long long>(st.st_mtim.tv_sec) >= racy_after ||
          static_cast<long long>(st.st_ctim.tv_sec) >= racy_after) {
        return "";
      }
      std::snprintf(line, sizeof(line), "%llu:%llu:%lld:%lld.%09ld:%lld.%09ld;",
                    static_cast<unsigned long long>(st.st_dev),
                    static_cast<unsigned long long>(st.st_ino),
                    static_cast<long long>(st.st_size), static_cast<long long>(st.st_mtim.tv_sec),
                    st.st_mtim.tv_nsec, static_cast<long long>(st.st_ctim.tv_sec),
                    st.st_ctim.tv_nsec);
    }
    out += line;
  }
  return out;
}

bool FailedLoads::Find(const std::string& name, const std::string& dir,
                       const std::string& fingerprint, Status* error) const {
  if (fingerprint.empty()) return false;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = failures_.find(Key(name, dir));
  if (it == failures_.end() || it->second.fingerprint != fingerprint) return false;
  *error = it->second.error;
  return true;
}

void FailedLoads::Remember(const std::string& name, const std::string& dir,
                           const std::string& fingerprint, const Status& error) {
  if (error.code() != StatusCode::kInvalidArgument || capacity_ == 0 || fingerprint.empty()) {
    return;
  }
  std::lock_guard<std::mutex> lock(mu_);
  // Bounded: past the capacity the oldest knowledge goes all at once (each is only a saving).
  if (failures_.size() >= capacity_ && failures_.count(Key(name, dir)) == 0) failures_.clear();
  failures_[Key(name, dir)] = Failure{fingerprint, error};
}

void FailedLoads::Forget(const std::string& name, const std::string& dir) {
  std::lock_guard<std::mutex> lock(mu_);
  failures_.erase(Key(name, dir));
}

size_t FailedLoads::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return failures_.size();
}

}  // namespace loom
