// Bounded JSON reading for untrusted input: a parse that never throws and never recurses deeply,
// and typed field getters whose errors name the field and the file (or request) it came from.
//
// Every JSON document loom reads (config.json, generation_config.json, adapter_config.json, the
// safetensors index, CLI batch and chat files, HTTP request bodies) goes through ParseJson:
//
//   ASSIGN_OR_RETURN(nlohmann::json j, ParseJson(text, path));
//   int64_t max_tokens = 16;
//   RETURN_IF_ERROR(GetOptionalInt(j, "max_tokens", path, &max_tokens, 1, 1 << 20));
//
// Nesting depth is checked by an O(n) scan before nlohmann sees the text, so nothing recursive
// (the parser, copies, dump(), destruction) ever meets a deep document.
//
// Thread-safety: every function is reentrant.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace loom {

struct JsonLimits {
  size_t max_bytes = size_t{64} << 20;  // text longer than this is refused (64 MiB)
  int max_depth = 128;                  // arrays/objects nested deeper are refused
  // ParseOrderedJson only: members of one object. nlohmann's ordered map finds each key by a
  // linear search on insert, so an object with n keys costs n²/2 string compares.
  int max_object_keys = 4096;
  // Elements of one array (0: no limit), checked on the text before any value is built: a
  // 100 MB safetensors header of one 50M-entry shape cost 2.3 GB as a DOM, and freeing that
  // DOM under a memory limit threw bad_alloc from a destructor (abort).
  int64_t max_array_elements = 0;
  // Arrays and objects in the whole document (0: no limit), and its values (an upper bound: 1 +
  // containers + commas), both counted on the text before any value is built. A DOM costs
  // 16 bytes a scalar and ~50-300 bytes a container: an 8 MiB request body of "[[],[],…]" built
  // 2.8 M empty arrays (812 MB with the copies a chat request makes), a 99 MB safetensors header
  // of 1.7 M empty tensors 1.6 GB.
  int64_t max_containers = 0;
  int64_t max_values = 0;
};

// Parses `text` as one JSON document. `what` names the source in errors (a file path, "request
// body"). Errors (all kInvalidArgument): too large, nested deeper than limits.max_depth, not
// valid JSON (with nlohmann's byte position). Never throws.
StatusOr<nlohmann::json> ParseJson(std::string_view text, std::string_view what,
                                   JsonLimits limits = {});
// The same, keeping the keys in file order (PEFT patterns, chat messages).
StatusOr<nlohmann::ordered_json> ParseOrderedJson(std::string_view text, std::string_view what,
                                                  JsonLimits limits = {});

// The O(n) depth scan ParseJson runs first (strings skipped); exposed for tests and for callers
// that hand text to another parser.
Status CheckJsonDepth(std::string_view text, std::string_view what, int max_depth);
// The O(n) scan for JsonLimits::max_array_elements (an upper bound: commas at the array's level).
Status CheckJsonArrayElements(std::string_view text, std::string_view what, int64_t max_elements);

// The O(n) scan for JsonLimits::max_containers / max_values (0: that one unchecked).
Status CheckJsonSize(std::string_view text, std::string_view what, int64_t max_containers,
                     int64_t max_values);

// Values in `j` (itself, and every element and member value below it), counted up to
// `stop_after` + 1 at most (iteratively: no recursion).
int64_t CountJsonValues(const nlohmann::ordered_json& j, int64_t stop_after);

// O(n) scan: kInvalidArgument when one object has more than `max_keys` members.
Status CheckJsonObjectKeys(std::string_view text, std::string_view what, int max_keys);

// `s` with every byte outside printable ASCII as \xNN: file or request bytes quoted in a
// message (invalid UTF-8 and control bytes never reach logs or error bodies as they are).
std::string PrintableAscii(std::string_view s);
// An object key from a file or a request as an error message quotes it: PrintableAscii of its
// first 40 bytes, "..." after them if it is longer (a key of megabytes never becomes a message
// of megabytes).
std::string KeyForMessage(std::string_view key);
// Any other text from a file or a request that a message quotes (a value, a pattern):
// PrintableAscii of its first `max_bytes` bytes, "..." after them if it is longer.
std::string TextForMessage(std::string_view text, size_t max_bytes = 200);
// dump() that never throws: invalid UTF-8 in strings is replaced by U+FFFD. `max_chars` > 0
// cuts the result (with "...") for use inside error messages.
std::string JsonToString(const nlohmann::json& j, int indent = -1, size_t max_chars = 0);
std::string JsonToString(const nlohmann::ordered_json& j, int indent = -1, size_t max_chars = 0);
// dump() for a file loom writes (a safetensors header, config.json, an index): a failure (out of
// memory) is an error naming `what`, never text written in its place (JsonToString's
// "<unprintable>" made a corrupt file and a success).
StatusOr<std::string> JsonForFile(const nlohmann::json& j, int indent, const std::string& what);
StatusOr<std::string> JsonForFile(const nlohmann::ordered_json& j, int indent, const std::string& what);

// Typed getters. `obj` must be an object (else an error naming `what`); `field` is a key of it.
// The Get* forms require the field; GetOptional* leave *out unchanged when the field is absent or
// null. A present value of the wrong type or outside [min, max] is an error:
//   "<what>: field 'max_tokens' must be an integer, got \"x\""
//   "<what>: field 'num_hidden_layers' is 100000000, above the maximum 1024"
// Integers accept JSON numbers with an exact integral value (16 and 16.0, not 16.5 nor "16").
// Floats must be finite numbers. Templates instantiated for json and ordered_json.
template <typename J>
Status GetInt(const J& obj, std::string_view field, std::string_view what, int64_t* out,
              int64_t min = std::numeric_limits<int64_t>::min(),
              int64_t max = std::numeric_limits<int64_t>::max());
template <typename J>
Status GetOptionalInt(const J& obj, std::string_view field, std::string_view what, int64_t* out,
                      int64_t min = std::numeric_limits<int64_t>::min(),
                      int64_t max = std::numeric_limits<int64_t>::max());
// int forms: the range defaults to int's.
template <typename J>
Status GetInt(const J& obj, std::string_view field, std::string_view what, int* out,
              int64_t min = std::numeric_limits<int>::min(),
              int64_t max = std::numeric_limits<int>::max());
template <typename J>
Status GetOptionalInt(const J& obj, std::string_view field, std::string_view what, int* out,
                      int64_t min = std::numeric_limits<int>::min(),
                      int64_t max = std::numeric_limits<int>::max());
template <typename J>
Status GetFloat(const J& obj, std::string_view field, std::string_view what, double* out,
                double min = -std::numeric_limits<double>::max(),
                double max = std::numeric_limits<double>::max());
template <typename J>
Status GetOptionalFloat(const J& obj, std::string_view field, std::string_view what, double* out,
                        double min = -std::numeric_limits<double>::max(),
                        double max = std::numeric_limits<double>::max());
// float forms (SamplingParams fields): the range defaults to float's finite range.
template <typename J>
Status GetFloat(const J& obj, std::string_view field, std::string_view what, float* out,
                double min = -std::numeric_limits<float>::max(),
                double max = std::numeric_limits<float>::max());
template <typename J>
Status GetOptionalFloat(const J& obj, std::string_view field, std::string_view what, float* out,
                        double min = -std::numeric_limits<float>::max(),
                        double max = std::numeric_limits<float>::max());
template <typename J>
Status GetString(const J& obj, std::string_view field, std::string_view what, std::string* out);
template <typename J>
Status GetOptionalString(const J& obj, std::string_view field, std::string_view what,
                         std::string* out);
template <typename J>
Status GetBool(const J& obj, std::string_view field, std::string_view what, bool* out);
template <typename J>
Status GetOptionalBool(const J& obj, std::string_view field, std::string_view what, bool* out);
// A list of integers, each in [min, max], at most max_size entries (token ids, layer lists).
template <typename J>
Status GetIntList(const J& obj, std::string_view field, std::string_view what,
                  std::vector<int32_t>* out, int64_t min, int64_t max,
                  size_t max_size = size_t{1} << 24);
template <typename J>
Status GetOptionalIntList(const J& obj, std::string_view field, std::string_view what,
                          std::vector<int32_t>* out, int64_t min, int64_t max,
                          size_t max_size = size_t{1} << 24);

// One JSON value (not a field) as an integer in [min, max]; `name` names it in errors
// ("entry 3 of prompt_tokens"). The building block of the getters above.
template <typename J>
Status JsonValueToInt(const J& v, std::string_view name, std::string_view what, int64_t* out,
                      int64_t min = std::numeric_limits<int64_t>::min(),
                      int64_t max = std::numeric_limits<int64_t>::max());
template <typename J>
Status JsonValueToFloat(const J& v, std::string_view name, std::string_view what, double* out,
                        double min = -std::numeric_limits<double>::max(),
                        double max = std::numeric_limits<double>::max());

}  // namespace loom
