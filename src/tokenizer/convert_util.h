// Helpers shared by the slow-tokenizer conversions (convert.cc, convert_sentencepiece.cc): config
// flags as Python reads them, named special tokens, and tokenizer.json component builders.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/convert.h"

namespace loom::tokenizer::convert_detail {

inline constexpr const char* kMeta = "\xE2\x96\x81";  // "▁"

// A config key that is present (possibly null).
bool Has(const nlohmann::json& config, const char* key);
// A boolean flag: absent → `fallback`; null → `if_null` (Python's None is falsy).
bool Flag(const nlohmann::json& config, const char* key, bool fallback, bool if_null = false);
// The content of a special-token value (a string or an AddedToken object), "" when none.
std::string Content(const nlohmann::json& v);

// Class defaults for the named special tokens (null: none).
struct Defaults {
  const char* bos = nullptr;
  const char* eos = nullptr;
  const char* unk = nullptr;
  const char* pad = nullptr;
  const char* mask = nullptr;
};
// The value of a named special token: the config's (null → none), else the class default.
nlohmann::json SpecialValue(const nlohmann::json& config, const std::string& key,
                            const Defaults& d);
// Appends the named special tokens and the config's extra (and, when `config_additional`,
// additional) special-token lists to c->added; sets bos/eos and add_bos/add_eos.
void AddNamedSpecials(const nlohmann::json& config, const Defaults& d, bool config_additional,
                      Converted* c);

nlohmann::json ByteLevelPre(bool add_prefix_space, bool use_regex);
nlohmann::json Replace(const nlohmann::json& pattern, const std::string& content);
nlohmann::json Metaspace(const std::string& prepend_scheme);
nlohmann::json StripLeftSpace();

}  // namespace loom::tokenizer::convert_detail
