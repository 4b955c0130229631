// JSON limits: depth pre-scan over the raw text, exception-free parsing, file reading.
#include "tokenizer/json_limits.h"

#include "base/file.h"
#include "base/json.h"

#include <utility>
#include <vector>

namespace loom::tokenizer {

// The tokenizer's names for the one bounded reader in base/json.h (depth pre-scan, no throw).
Status CheckJsonDepth(std::string_view text, int max_depth, std::string_view what) {
  return loom::CheckJsonDepth(text, what, max_depth);
}

StatusOr<nlohmann::json> ParseJsonText(std::string_view text, std::string_view what) {
  JsonLimits limits;
  limits.max_bytes = kMaxRequestFileBytes;
  limits.max_depth = kMaxJsonDepth;
  return loom::ParseJson(text, what, limits);
}

StatusOr<nlohmann::ordered_json> ParseOrderedJsonText(std::string_view text,
                                                      std::string_view what) {
  JsonLimits limits;
  limits.max_bytes = kMaxRequestFileBytes;
  limits.max_depth = kMaxJsonDepth;
  return loom::ParseOrderedJson(text, what, limits);
}

Status CheckJsonValueDepth(const nlohmann::ordered_json& j, int max_depth, std::string_view what) {
  std::vector<std::pair<const nlohmann::ordered_json*, int>> stack = {{&j, 0}};
  while (!stack.empty()) {
    const auto [v, depth] = stack.back();
    stack.pop_back();
    if (!v->is_structured()) continue;
    if (depth + 1 > max_depth) {
      return InvalidArgument(std::string(what) + ": JSON nested deeper than " +
                             std::to_string(max_depth) + " levels");
    }
    for (const auto& child : *v) {
      if (child.is_structured()) stack.push_back({&child, depth + 1});
    }
  }
  return OkStatus();
}

Status CheckSequenceSize(const nlohmann::json& j, std::string_view what) {
  std::vector<const nlohmann::json*> stack = {&j};
  size_t objects = 0;
  while (!stack.empty()) {
    const nlohmann::json* v = stack.back();
    stack.pop_back();
    if (!v->is_structured()) continue;
    if (v->is_object() && ++objects > kMaxSequenceComponents + 1) {  // + the Sequence itself
      return InvalidArgument(std::string(what) + " Sequence: more than " +
                             std::to_string(kMaxSequenceComponents) + " components");
    }
    for (const auto& child : *v) {
      if (child.is_structured()) stack.push_back(&child);
    }
  }
  return OkStatus();
}

StatusOr<std::string> ReadTextFile(const std::string& path) {
  // Regular files only (a FIFO would block, /dev/zero never ends), at most 256 MiB.
  return ReadFileBounded(path, kMaxRequestFileBytes);
}

}  // namespace loom::tokenizer
