// JSON limits: depth pre-scan over the raw text, exception-free parsing, file reading.
#include "tokenizer/json_limits.h"

#include "base/file.h"

#include <fstream>
#include <sstream>
#include <utility>
#include <vector>

namespace loom::tokenizer {

Status CheckJsonDepth(std::string_view text, int max_depth, std::string_view what) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;  // the escaped character (a quote or backslash) never ends the string
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) {
        return InvalidArgument(std::string(what) + ": JSON nested deeper than " +
                               std::to_string(max_depth) + " levels (at byte " +
                               std::to_string(i) + ")");
      }
    } else if (c == ']' || c == '}') {
      if (depth > 0) --depth;
    }
  }
  return OkStatus();
}

namespace {

template <typename Json>
StatusOr<Json> ParseChecked(std::string_view text, std::string_view what) {
  RETURN_IF_ERROR(CheckJsonDepth(text, kMaxJsonDepth, what));
  try {
    Json j = Json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) return InvalidArgument(std::string(what) + " is not valid JSON");
    return j;
  } catch (const std::bad_alloc&) {
    return ResourceExhausted(std::string(what) + ": out of memory while parsing JSON");
  } catch (const std::exception& e) {  // nlohmann may still throw from inside the SAX parser
    return InvalidArgument(std::string(what) + " is not valid JSON: " + e.what());
  }
}

}  // namespace

StatusOr<nlohmann::json> ParseJsonText(std::string_view text, std::string_view what) {
  return ParseChecked<nlohmann::json>(text, what);
}

StatusOr<nlohmann::ordered_json> ParseOrderedJsonText(std::string_view text,
                                                      std::string_view what) {
  return ParseChecked<nlohmann::ordered_json>(text, what);
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

StatusOr<std::string> ReadTextFile(const std::string& path) {
  // Regular files only (a FIFO would block, /dev/zero never ends), at most 256 MiB.
  return ReadFileBounded(path, kMaxRequestFileBytes);
}

}  // namespace loom::tokenizer
