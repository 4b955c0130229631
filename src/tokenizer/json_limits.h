// Limits for untrusted JSON (tokenizer.json, tokenizer_config.json, chat messages): a nesting
// pre-scan before nlohmann parses, and exception-free parsing that names the file.
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "base/status.h"

namespace loom::tokenizer {

// Deepest nesting of arrays / objects accepted in a tokenizer file or a chat request. Real
// files nest 6 levels at most; nlohmann's copy, dump and compare recurse once per level, so an
// unchecked 200k-level file overflows the stack.
inline constexpr int kMaxJsonDepth = 128;

// O(n) scan of `text` (strings and their escapes skipped): kInvalidArgument naming `what` when
// arrays / objects nest deeper than `max_depth`. Says nothing about other syntax errors.
Status CheckJsonDepth(std::string_view text, int max_depth, std::string_view what);

// CheckJsonDepth, then nlohmann's parser without exceptions. `what` names the file in errors.
StatusOr<nlohmann::json> ParseJsonText(std::string_view text, std::string_view what);
StatusOr<nlohmann::ordered_json> ParseOrderedJsonText(std::string_view text,
                                                      std::string_view what);

// Nesting of an already parsed value (iterative, so any depth is safe to measure): ok when at
// most `max_depth`, else kInvalidArgument naming `what`.
Status CheckJsonValueDepth(const nlohmann::ordered_json& j, int max_depth, std::string_view what);

// Components of one normalizer / pre_tokenizer / decoder / post_processor Sequence, nested ones
// included (each JSON object counts). Real files have fewer than 10; every component runs over
// every request's text, so 300,000 Lowercase steps made a 24 KB prompt take 13 s.
inline constexpr size_t kMaxSequenceComponents = 256;
// kInvalidArgument naming `what` when `j` holds more than kMaxSequenceComponents objects
// (iterative; stops counting at the limit).
Status CheckSequenceSize(const nlohmann::json& j, std::string_view what);

// Reads a whole file (kNotFound naming it when it cannot be opened).
StatusOr<std::string> ReadTextFile(const std::string& path);

}  // namespace loom::tokenizer
