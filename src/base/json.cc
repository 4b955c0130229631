// Bounded JSON parse (depth pre-scan, size cap, no exceptions) and typed field getters.
#include "base/json.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <new>
#include <vector>

namespace loom {

namespace {

std::string Prefix(std::string_view what) {
  return what.empty() ? std::string("JSON: ") : std::string(what) + ": ";
}

}  // namespace

std::string PrintableAscii(std::string_view s) {
  std::string out;
  for (unsigned char c : s) {
    if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", c);
      out += buf;
    }
  }
  return out;
}

std::string KeyForMessage(std::string_view key) { return TextForMessage(key, 40); }

std::string TextForMessage(std::string_view text, size_t max_bytes) {
  return PrintableAscii(text.substr(0, max_bytes)) + (text.size() > max_bytes ? "..." : "");
}

namespace {

template <typename J>
StatusOr<J> ParseImpl(std::string_view text, std::string_view what, JsonLimits limits) {
  if (text.size() > limits.max_bytes) {
    return InvalidArgument(Prefix(what) + "JSON text is " + std::to_string(text.size()) +
                           " bytes, above the limit of " + std::to_string(limits.max_bytes));
  }
  RETURN_IF_ERROR(CheckJsonDepth(text, what, limits.max_depth));
  if (limits.max_array_elements > 0) {
    RETURN_IF_ERROR(CheckJsonArrayElements(text, what, limits.max_array_elements));
  }
  if (limits.max_containers > 0 || limits.max_values > 0) {
    RETURN_IF_ERROR(CheckJsonSize(text, what, limits.max_containers, limits.max_values));
  }
  try {
    J j = J::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) {
      // Parse again with exceptions only to learn where it failed (depth is already bounded).
      std::string why = "not valid JSON";
      try {
        const J reparsed = J::parse(text.begin(), text.end());  // throws: `text` did not parse
        (void)reparsed;
      } catch (const nlohmann::json::exception& e) {
        // nlohmann's text quotes the bytes last read ("last read: '...'") verbatim.
        why = "not valid JSON (" + PrintableAscii(e.what()) + ")";
      }
      return InvalidArgument(Prefix(what) + why);
    }
    return j;
  } catch (const std::bad_alloc&) {
    return ResourceExhausted(Prefix(what) + "out of memory parsing JSON");
  } catch (const std::exception& e) {
    return InvalidArgument(Prefix(what) + "not valid JSON (" + e.what() + ")");
  }
}

const char* TypeName(nlohmann::json::value_t t) {
  using V = nlohmann::json::value_t;
  switch (t) {
    case V::null: return "null";
    case V::object: return "an object";
    case V::array: return "a list";
    case V::string: return "a string";
    case V::boolean: return "a boolean";
    case V::number_integer:
    case V::number_unsigned: return "an integer";
    case V::number_float: return "a number";
    case V::binary: return "binary";
    case V::discarded: return "invalid";
  }
  return "?";
}

template <typename J>
std::string Shown(const J& v) {
  return JsonToString(v, -1, 80);
}

template <typename J>
std::string FieldPrefix(std::string_view what, std::string_view field) {
  return Prefix(what) + "field '" + std::string(field) + "'";
}

// Finds obj[field]; nullptr when absent or null. Error when obj is not an object.
template <typename J>
StatusOr<const J*> Find(const J& obj, std::string_view field, std::string_view what,
                        bool required) {
  if (!obj.is_object()) {
    return InvalidArgument(Prefix(what) + "expected a JSON object, got " + TypeName(obj.type()));
  }
  auto it = obj.find(std::string(field));
  if (it == obj.end() || it->is_null()) {
    if (required) {
      return InvalidArgument(Prefix(what) + "missing required field '" + std::string(field) + "'");
    }
    return static_cast<const J*>(nullptr);
  }
  return &*it;
}

// Calls `on(c, i)` for each structural byte ([ ] { } , :) of `text` outside its strings (a string
// ends at the next quote not escaped by a backslash), stopping at the first error it returns.
// Unbalanced or invalid text is the parser's to report.
template <typename On>
Status ScanJsonStructure(std::string_view text, On on) {
  const size_t n = text.size();
  for (size_t i = 0; i < n; ++i) {
    const char c = text[i];
    if (c == '"') {
      for (++i; i < n && text[i] != '"'; ++i) {
        if (text[i] == '\\') ++i;
      }
    } else if (c == '[' || c == '{' || c == ']' || c == '}' || c == ',' || c == ':') {
      RETURN_IF_ERROR(on(c, i));
    }
  }
  return OkStatus();
}

}  // namespace

Status CheckJsonDepth(std::string_view text, std::string_view what, int max_depth) {
  int depth = 0;
  return ScanJsonStructure(text, [&](char c, size_t i) {
    if (c == '[' || c == '{') {
      if (++depth > max_depth) {
        return InvalidArgument(Prefix(what) + "JSON nested deeper than " +
                               std::to_string(max_depth) + " levels (at byte " +
                               std::to_string(i) + ")");
      }
    } else if (c == ']' || c == '}') {
      --depth;
    }
    return OkStatus();
  });
}

namespace {
// The O(n) scan behind CheckJsonArrayElements and CheckJsonObjectKeys: for each open container
// of kind `open` ('[' or '{'), 1 (an array's first element) or 0 plus one per `sep` (',' or ':')
// at its own level; kInvalidArgument past `max`.
Status CheckContainerCounts(std::string_view text, std::string_view what, char open, char sep,
                            int64_t first, int64_t max) {
  // Per open container: -1 for the other kind, else the count so far.
  std::vector<int64_t> stack;
  return ScanJsonStructure(text, [&](char c, size_t i) {
    if (c == '[' || c == '{') {
      stack.push_back(c == open ? first : -1);
    } else if (c == ']' || c == '}') {
      if (!stack.empty()) stack.pop_back();
    } else if (c == sep && !stack.empty() && stack.back() >= 0) {
      if (++stack.back() > max) {
        return InvalidArgument(Prefix(what) + (open == '[' ? "a JSON array" : "a JSON object") +
                               " has more than " + std::to_string(max) +
                               (open == '[' ? " elements" : " members") + " (at byte " +
                               std::to_string(i) + ")");
      }
    }
    return OkStatus();
  });
}
}  // namespace

Status CheckJsonSize(std::string_view text, std::string_view what, int64_t max_containers,
                     int64_t max_values) {
  int64_t containers = 0, values = 1;
  return ScanJsonStructure(text, [&](char c, size_t i) {
    if (c == '[' || c == '{') {
      ++containers;
      ++values;  // its first element, if it has one
      if (max_containers > 0 && containers > max_containers) {
        return InvalidArgument(Prefix(what) + "more than " + std::to_string(max_containers) +
                               " JSON arrays and objects (at byte " + std::to_string(i) + ")");
      }
    } else if (c == ',') {
      ++values;
    }
    if (max_values > 0 && values > max_values) {
      return InvalidArgument(Prefix(what) + "more than " + std::to_string(max_values) +
                             " JSON values (at byte " + std::to_string(i) + ")");
    }
    return OkStatus();
  });
}

int64_t CountJsonValues(const nlohmann::ordered_json& j, int64_t stop_after) {
  std::vector<const nlohmann::ordered_json*> pending{&j};
  int64_t count = 0;
  while (!pending.empty() && count <= stop_after) {
    const nlohmann::ordered_json* v = pending.back();
    pending.pop_back();
    ++count;
    if (v->is_structured()) {
      for (const auto& child : *v) pending.push_back(&child);
    }
  }
  return count;
}

Status CheckJsonArrayElements(std::string_view text, std::string_view what, int64_t max_elements) {
  return CheckContainerCounts(text, what, '[', ',', 1, max_elements);
}

Status CheckJsonObjectKeys(std::string_view text, std::string_view what, int max_keys) {
  return CheckContainerCounts(text, what, '{', ':', 0, max_keys);
}

StatusOr<nlohmann::json> ParseJson(std::string_view text, std::string_view what,
                                   JsonLimits limits) {
  return ParseImpl<nlohmann::json>(text, what, limits);
}

StatusOr<nlohmann::ordered_json> ParseOrderedJson(std::string_view text, std::string_view what,
                                                  JsonLimits limits) {
  // Depth first (bounds the scan's stack), then the member count the ordered map needs.
  RETURN_IF_ERROR(CheckJsonDepth(text, what, limits.max_depth));
  if (limits.max_object_keys > 0) {
    RETURN_IF_ERROR(CheckJsonObjectKeys(text, what, limits.max_object_keys));
  }
  return ParseImpl<nlohmann::ordered_json>(text, what, limits);
}

namespace {
template <typename J>
StatusOr<std::string> ForFileImpl(const J& j, int indent, const std::string& what) {
  try {
    return j.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace);
  } catch (const std::exception& e) {
    return ResourceExhausted(what + ": cannot serialize its JSON: " + e.what());
  }
}
}  // namespace

StatusOr<std::string> JsonForFile(const nlohmann::json& j, int indent, const std::string& what) {
  return ForFileImpl(j, indent, what);
}
StatusOr<std::string> JsonForFile(const nlohmann::ordered_json& j, int indent,
                                  const std::string& what) {
  return ForFileImpl(j, indent, what);
}

namespace {
template <typename J>
std::string ToStringImpl(const J& j, int indent, size_t max_chars) {
  StatusOr<std::string> dumped = ForFileImpl(j, indent, "");
  std::string s = dumped.ok() ? std::move(dumped).value() : "<unprintable>";
  if (max_chars > 0 && s.size() > max_chars) {
    s.resize(max_chars);
    // Do not cut a UTF-8 sequence in half.
    while (!s.empty() && (static_cast<unsigned char>(s.back()) & 0xC0) == 0x80) s.pop_back();
    if (!s.empty() && (static_cast<unsigned char>(s.back()) & 0x80)) s.pop_back();
    s += "...";
  }
  return s;
}
}  // namespace

std::string JsonToString(const nlohmann::json& j, int indent, size_t max_chars) {
  return ToStringImpl(j, indent, max_chars);
}
std::string JsonToString(const nlohmann::ordered_json& j, int indent, size_t max_chars) {
  return ToStringImpl(j, indent, max_chars);
}

template <typename J>
Status JsonValueToInt(const J& v, std::string_view name, std::string_view what, int64_t* out,
                      int64_t min, int64_t max) {
  const std::string at = Prefix(what) + std::string(name);
  int64_t value = 0;
  if (v.is_number_unsigned()) {
    const uint64_t u = v.template get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return InvalidArgument(at + " is " + Shown(v) + ", above the maximum " + std::to_string(max));
    }
    value = static_cast<int64_t>(u);
  } else if (v.is_number_integer()) {
    value = v.template get<int64_t>();
  } else if (v.is_number_float()) {
    const double d = v.template get<double>();
    if (!std::isfinite(d) || std::floor(d) != d) {
      return InvalidArgument(at + " must be an integer, got " + Shown(v));
    }
    // 2^63 is exactly representable; anything at or beyond it does not fit.
    if (d >= 9223372036854775808.0) {
      return InvalidArgument(at + " is " + Shown(v) + ", above the maximum " + std::to_string(max));
    }
    if (d < -9223372036854775808.0) {
      return InvalidArgument(at + " is " + Shown(v) + ", below the minimum " + std::to_string(min));
    }
    value = static_cast<int64_t>(d);
  } else {
    return InvalidArgument(at + " must be an integer, got " + Shown(v));
  }
  if (value < min) {
    return InvalidArgument(at + " is " + std::to_string(value) + ", below the minimum " +
                           std::to_string(min));
  }
  if (value > max) {
    return InvalidArgument(at + " is " + std::to_string(value) + ", above the maximum " +
                           std::to_string(max));
  }
  *out = value;
  return OkStatus();
}

template <typename J>
Status JsonValueToFloat(const J& v, std::string_view name, std::string_view what, double* out,
                        double min, double max) {
  const std::string at = Prefix(what) + std::string(name);
  if (!v.is_number()) return InvalidArgument(at + " must be a number, got " + Shown(v));
  const double d = v.template get<double>();
  if (!std::isfinite(d)) return InvalidArgument(at + " must be a finite number, got " + Shown(v));
  if (d < min) {
    return InvalidArgument(at + " is " + Shown(v) + ", below the minimum " + std::to_string(min));
  }
  if (d > max) {
    return InvalidArgument(at + " is " + Shown(v) + ", above the maximum " + std::to_string(max));
  }
  *out = d;
  return OkStatus();
}

namespace {

template <typename J>
Status IntField(const J& obj, std::string_view field, std::string_view what, int64_t* out,
                int64_t min, int64_t max, bool required) {
  ASSIGN_OR_RETURN(const J* v, Find(obj, field, what, required));
  if (v == nullptr) return OkStatus();
  return JsonValueToInt(*v, "field '" + std::string(field) + "'", what, out, min, max);
}

template <typename J>
Status IntField32(const J& obj, std::string_view field, std::string_view what, int* out,
                  int64_t min, int64_t max, bool required) {
  min = std::max<int64_t>(min, std::numeric_limits<int>::min());
  max = std::min<int64_t>(max, std::numeric_limits<int>::max());
  int64_t v = *out;
  RETURN_IF_ERROR(IntField(obj, field, what, &v, min, max, required));
  *out = static_cast<int>(v);
  return OkStatus();
}

template <typename J>
Status FloatField(const J& obj, std::string_view field, std::string_view what, double* out,
                  double min, double max, bool required) {
  ASSIGN_OR_RETURN(const J* v, Find(obj, field, what, required));
  if (v == nullptr) return OkStatus();
  return JsonValueToFloat(*v, "field '" + std::string(field) + "'", what, out, min, max);
}

template <typename J>
Status FloatField32(const J& obj, std::string_view field, std::string_view what, float* out,
                    double min, double max, bool required) {
  min = std::max<double>(min, -std::numeric_limits<float>::max());
  max = std::min<double>(max, std::numeric_limits<float>::max());
  double v = *out;
  RETURN_IF_ERROR(FloatField(obj, field, what, &v, min, max, required));
  *out = static_cast<float>(v);
  return OkStatus();
}

template <typename J>
Status StringField(const J& obj, std::string_view field, std::string_view what, std::string* out,
                   bool required) {
  ASSIGN_OR_RETURN(const J* v, Find(obj, field, what, required));
  if (v == nullptr) return OkStatus();
  if (!v->is_string()) {
    return InvalidArgument(FieldPrefix<J>(what, field) + " must be a string, got " + Shown(*v));
  }
  *out = v->template get<std::string>();
  return OkStatus();
}

template <typename J>
Status BoolField(const J& obj, std::string_view field, std::string_view what, bool* out,
                 bool required) {
  ASSIGN_OR_RETURN(const J* v, Find(obj, field, what, required));
  if (v == nullptr) return OkStatus();
  if (!v->is_boolean()) {
    return InvalidArgument(FieldPrefix<J>(what, field) + " must be true or false, got " +
                           Shown(*v));
  }
  *out = v->template get<bool>();
  return OkStatus();
}

template <typename J>
Status IntListField(const J& obj, std::string_view field, std::string_view what,
                    std::vector<int32_t>* out, int64_t min, int64_t max, size_t max_size,
                    bool required) {
  ASSIGN_OR_RETURN(const J* v, Find(obj, field, what, required));
  if (v == nullptr) return OkStatus();
  if (!v->is_array()) {
    return InvalidArgument(FieldPrefix<J>(what, field) + " must be a list of integers, got " +
                           Shown(*v));
  }
  if (v->size() > max_size) {
    return InvalidArgument(FieldPrefix<J>(what, field) + " has " + std::to_string(v->size()) +
                           " entries, above the maximum " + std::to_string(max_size));
  }
  min = std::max<int64_t>(min, std::numeric_limits<int32_t>::min());
  max = std::min<int64_t>(max, std::numeric_limits<int32_t>::max());
  std::vector<int32_t> ids;
  ids.reserve(v->size());
  for (size_t i = 0; i < v->size(); ++i) {
    int64_t x = 0;
    RETURN_IF_ERROR(JsonValueToInt((*v)[i],
                                   "field '" + std::string(field) + "' entry " + std::to_string(i),
                                   what, &x, min, max));
    ids.push_back(static_cast<int32_t>(x));
  }
  *out = std::move(ids);
  return OkStatus();
}

}  // namespace

template <typename J>
Status GetInt(const J& obj, std::string_view field, std::string_view what, int64_t* out,
              int64_t min, int64_t max) {
  return IntField(obj, field, what, out, min, max, true);
}
template <typename J>
Status GetOptionalInt(const J& obj, std::string_view field, std::string_view what, int64_t* out,
                      int64_t min, int64_t max) {
  return IntField(obj, field, what, out, min, max, false);
}
template <typename J>
Status GetInt(const J& obj, std::string_view field, std::string_view what, int* out, int64_t min,
              int64_t max) {
  return IntField32(obj, field, what, out, min, max, true);
}
template <typename J>
Status GetOptionalInt(const J& obj, std::string_view field, std::string_view what, int* out,
                      int64_t min, int64_t max) {
  return IntField32(obj, field, what, out, min, max, false);
}
template <typename J>
Status GetFloat(const J& obj, std::string_view field, std::string_view what, double* out,
                double min, double max) {
  return FloatField(obj, field, what, out, min, max, true);
}
template <typename J>
Status GetOptionalFloat(const J& obj, std::string_view field, std::string_view what, double* out,
                        double min, double max) {
  return FloatField(obj, field, what, out, min, max, false);
}
template <typename J>
Status GetFloat(const J& obj, std::string_view field, std::string_view what, float* out, double min,
                double max) {
  return FloatField32(obj, field, what, out, min, max, true);
}
template <typename J>
Status GetOptionalFloat(const J& obj, std::string_view field, std::string_view what, float* out,
                        double min, double max) {
  return FloatField32(obj, field, what, out, min, max, false);
}
template <typename J>
Status GetString(const J& obj, std::string_view field, std::string_view what, std::string* out) {
  return StringField(obj, field, what, out, true);
}
template <typename J>
Status GetOptionalString(const J& obj, std::string_view field, std::string_view what,
                         std::string* out) {
  return StringField(obj, field, what, out, false);
}
template <typename J>
Status GetBool(const J& obj, std::string_view field, std::string_view what, bool* out) {
  return BoolField(obj, field, what, out, true);
}
template <typename J>
Status GetOptionalBool(const J& obj, std::string_view field, std::string_view what, bool* out) {
  return BoolField(obj, field, what, out, false);
}
template <typename J>
Status GetIntList(const J& obj, std::string_view field, std::string_view what,
                  std::vector<int32_t>* out, int64_t min, int64_t max, size_t max_size) {
  return IntListField(obj, field, what, out, min, max, max_size, true);
}
template <typename J>
Status GetOptionalIntList(const J& obj, std::string_view field, std::string_view what,
                          std::vector<int32_t>* out, int64_t min, int64_t max, size_t max_size) {
  return IntListField(obj, field, what, out, min, max, max_size, false);
}

#define LOOM_JSON_INSTANTIATE(J)                                                               \
  template Status GetInt<J>(const J&, std::string_view, std::string_view, int64_t*, int64_t,   \
                            int64_t);                                                          \
  template Status GetOptionalInt<J>(const J&, std::string_view, std::string_view, int64_t*,    \
                                    int64_t, int64_t);                                         \
  template Status GetInt<J>(const J&, std::string_view, std::string_view, int*, int64_t,       \
                            int64_t);                                                          \
  template Status GetOptionalInt<J>(const J&, std::string_view, std::string_view, int*,        \
                                    int64_t, int64_t);                                         \
  template Status GetFloat<J>(const J&, std::string_view, std::string_view, double*, double,   \
                              double);                                                         \
  template Status GetOptionalFloat<J>(const J&, std::string_view, std::string_view, double*,   \
                                      double, double);                                         \
  template Status GetFloat<J>(const J&, std::string_view, std::string_view, float*, double,    \
                              double);                                                         \
  template Status GetOptionalFloat<J>(const J&, std::string_view, std::string_view, float*,    \
                                      double, double);                                         \
  template Status GetString<J>(const J&, std::string_view, std::string_view, std::string*);    \
  template Status GetOptionalString<J>(const J&, std::string_view, std::string_view,           \
                                       std::string*);                                          \
  template Status GetBool<J>(const J&, std::string_view, std::string_view, bool*);             \
  template Status GetOptionalBool<J>(const J&, std::string_view, std::string_view, bool*);     \
  template Status GetIntList<J>(const J&, std::string_view, std::string_view,                  \
                                std::vector<int32_t>*, int64_t, int64_t, size_t);              \
  template Status GetOptionalIntList<J>(const J&, std::string_view, std::string_view,          \
                                        std::vector<int32_t>*, int64_t, int64_t, size_t);      \
  template Status JsonValueToInt<J>(const J&, std::string_view, std::string_view, int64_t*,    \
                                    int64_t, int64_t);                                         \
  template Status JsonValueToFloat<J>(const J&, std::string_view, std::string_view, double*,   \
                                      double, double);

LOOM_JSON_INSTANTIATE(nlohmann::json)
LOOM_JSON_INSTANTIATE(nlohmann::ordered_json)
#undef LOOM_JSON_INSTANTIATE

}  // namespace loom
