// SiteTable: index of a model's adaptable projections by module path.
#include "lora/site_table.h"

#include <algorithm>

namespace loom {

int SiteTable::Add(LinearSite site) {
  const int index = static_cast<int>(sites_.size());
  by_path_.emplace(site.path, index);
  sites_.push_back(std::move(site));
  return index;
}

int SiteTable::Find(const std::string& path) const {
  auto it = by_path_.find(path);
  return it == by_path_.end() ? -1 : it->second;
}

std::vector<std::string> SiteTable::LeafNames(bool all_linear_only) const {
  std::vector<std::string> names;
  auto add = [&](const std::string& path) {
    const size_t dot = path.rfind('.');
    std::string leaf = dot == std::string::npos ? path : path.substr(dot + 1);
    if (std::find(names.begin(), names.end(), leaf) == names.end()) names.push_back(leaf);
  };
  if (!embedding_path_.empty() && !all_linear_only) add(embedding_path_);
  for (const LinearSite& s : sites_) {
    if (s.all_linear || !all_linear_only) add(s.path);
  }
  return names;
}

}  // namespace loom
