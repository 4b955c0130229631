// Slow-tokenizer files → tokenizer.json, following transformers 5 (models/*/tokenization_*.py,
// TokenizersBackend.convert_to_native_format): the shared helpers, the config's added tokens and
// vocab.json + merges.txt (GPT2Tokenizer, Qwen2Tokenizer). SentencePiece: convert_sentencepiece.cc.
#include "tokenizer/convert.h"

#include <algorithm>
#include <charconv>
#include <system_error>
#include <vector>

#include "tokenizer/bpe_model.h"
#include "tokenizer/convert_util.h"
#include "tokenizer/json_limits.h"
#include "tokenizer/unicode.h"

namespace loom::tokenizer {

namespace convert_detail {

using nlohmann::json;

// The special-token attributes transformers registers, in its order.
const char* const kSpecialKeys[] = {"bos_token", "eos_token", "unk_token", "sep_token",
                                    "pad_token", "cls_token", "mask_token"};

// A config key that is present (possibly null).
bool Has(const json& config, const char* key) { return config.is_object() && config.contains(key); }

// A boolean flag: absent → `fallback`; null → `if_null` (Python's None is falsy).
bool Flag(const json& config, const char* key, bool fallback, bool if_null) {
  if (!Has(config, key)) return fallback;
  const json& v = config[key];
  if (v.is_null()) return if_null;
  return v.is_boolean() ? v.get<bool>() : fallback;
}

// The content of a special-token value (a string or an AddedToken object), "" when none.
std::string Content(const json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) {
    return v["content"].get<std::string>();
  }
  return "";
}

// The AddedToken a special-token value registers (special, not normalized by default).
json SpecialAdded(const json& v) {
  json t = v.is_object() ? v : json{{"content", Content(v)}};
  t["special"] = true;
  if (!t.contains("normalized")) t["normalized"] = false;
  return t;
}

const char* DefaultFor(const Defaults& d, const std::string& key) {
  if (key == "bos_token") return d.bos;
  if (key == "eos_token") return d.eos;
  if (key == "unk_token") return d.unk;
  if (key == "pad_token") return d.pad;
  if (key == "mask_token") return d.mask;
  return nullptr;
}

// The value of a named special token: the config's (null → none), else the class default.
json SpecialValue(const json& config, const std::string& key, const Defaults& d) {
  if (Has(config, key.c_str())) return config[key];
  const char* v = DefaultFor(d, key);
  return v ? json(v) : json();
}

// Appends the named special tokens and a config's extra / additional special-token lists.
void AddNamedSpecials(const json& config, const Defaults& d, bool config_additional, Converted* c) {
  for (const char* key : kSpecialKeys) {
    const json v = SpecialValue(config, key, d);
    if (!Content(v).empty()) c->added.push_back(SpecialAdded(v));
  }
  for (const char* key : {"additional_special_tokens", "extra_special_tokens"}) {
    if (!config_additional && std::string(key) == "additional_special_tokens") continue;
    if (!Has(config, key) || !config[key].is_array()) continue;
    for (const json& v : config[key]) {
      if (!Content(v).empty()) c->added.push_back(SpecialAdded(v));
    }
  }
  c->bos_token = Content(SpecialValue(config, "bos_token", d));
  c->eos_token = Content(SpecialValue(config, "eos_token", d));
  c->add_bos = Flag(config, "add_bos_token", false) && !c->bos_token.empty();
  c->add_eos = Flag(config, "add_eos_token", false) && !c->eos_token.empty();
}

json ByteLevelPre(bool add_prefix_space, bool use_regex) {
  return {{"type", "ByteLevel"},
          {"add_prefix_space", add_prefix_space},
          {"trim_offsets", true},
          {"use_regex", use_regex}};
}

json Replace(const json& pattern, const std::string& content) {
  return {{"type", "Replace"}, {"pattern", pattern}, {"content", content}};
}

json Metaspace(const std::string& prepend_scheme) {
  return {{"type", "Metaspace"},
          {"replacement", kMeta},
          {"prepend_scheme", prepend_scheme},
          {"split", false}};
}

json StripLeftSpace() { return {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}; }

}  // namespace convert_detail

namespace {

using nlohmann::json;
using namespace convert_detail;

// Qwen2Tokenizer's PRETOKENIZE_REGEX.
const char* const kQwen2Regex =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+"
    "[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

}  // namespace

StatusOr<json> ConfigAddedTokens(const json& config, const std::string& config_path) {
  json extra = json::array();
  if (!config.is_object() || !config.contains("added_tokens_decoder")) return extra;
  const json& decoder = config["added_tokens_decoder"];
  if (!decoder.is_object()) return extra;
  std::vector<std::pair<int64_t, json>> by_id;
  for (const auto& [key, token] : decoder.items()) {
    int64_t id = 0;
    const auto [end, ec] = std::from_chars(key.data(), key.data() + key.size(), id);
    if (key.empty() || ec != std::errc() || end != key.data() + key.size() || id < 0 ||
        id > kMaxTokenId) {
      return InvalidArgument(config_path + ": added_tokens_decoder key '" + key +
                             "' is not a token id (a decimal integer in [0, " +
                             std::to_string(kMaxTokenId) + "])");
    }
    if (!token.is_object()) {
      return InvalidArgument(config_path + ": added_tokens_decoder['" + key +
                             "'] must be an object");
    }
    json t = token;
    t["id"] = id;
    by_id.emplace_back(id, std::move(t));
  }
  std::stable_sort(by_id.begin(), by_id.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  for (auto& [id, t] : by_id) extra.push_back(std::move(t));
  return extra;
}

std::string TokenizerClass(const json& config) {
  if (!Has(config, "tokenizer_class") || !config["tokenizer_class"].is_string()) return "";
  std::string cls = config["tokenizer_class"].get<std::string>();
  if (cls.size() > 4 && cls.ends_with("Fast") && cls != "PreTrainedTokenizerFast") {
    cls.resize(cls.size() - 4);
  }
  return cls;
}

bool ReadsVocabMerges(const std::string& cls) {
  return cls == "GPT2Tokenizer" || cls == "Qwen2Tokenizer";
}

StatusOr<Converted> ConvertVocabMerges(std::string_view vocab_json, std::string_view merges_txt,
                                       const json& config, const std::string& dir) {
  const std::string cls = TokenizerClass(config);
  if (!ReadsVocabMerges(cls)) {
    return InvalidArgument(dir + ": tokenizer_class '" + cls +
                           "' with vocab.json + merges.txt is not supported by loom (supported: "
                           "GPT2Tokenizer, Qwen2Tokenizer; or add a tokenizer.json)");
  }
  const std::string vocab_path = dir + "/vocab.json", merges_path = dir + "/merges.txt";
  ASSIGN_OR_RETURN(json vocab, ParseJsonText(vocab_json, vocab_path));
  if (!vocab.is_object()) return InvalidArgument(vocab_path + ": expected an object token → id");
  // merges.txt as the tokenizers library reads it: "#version" lines skipped, every other line
  // (a final newline ends the last one) exactly two tokens separated by one space.
  json merges = json::array();
  size_t line_no = 0, pos = 0;
  while (pos < merges_txt.size()) {
    size_t end = merges_txt.find('\n', pos);
    if (end == std::string_view::npos) end = merges_txt.size();
    std::string_view line = merges_txt.substr(pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.starts_with("#version")) continue;
    const size_t sp = line.find(' ');
    if (sp == std::string_view::npos || line.find(' ', sp + 1) != std::string_view::npos) {
      return InvalidArgument(merges_path + ": line " + std::to_string(line_no) +
                             " is not two tokens separated by one space");
    }
    if (!IsValidUtf8(line)) {
      return InvalidArgument(merges_path + ": line " + std::to_string(line_no) +
                             " is not valid UTF-8");
    }
    merges.push_back(
        json::array({std::string(line.substr(0, sp)), std::string(line.substr(sp + 1))}));
  }
  Converted c;
  json& t = c.tokenizer;
  t = {{"version", "1.0"}, {"added_tokens", json::array()}, {"post_processor", nullptr}};
  t["model"] = {{"type", "BPE"},
                {"dropout", nullptr},
                {"unk_token", nullptr},
                {"continuing_subword_prefix", ""},
                {"end_of_word_suffix", ""},
                {"fuse_unk", false},
                {"byte_fallback", false},
                {"ignore_merges", false},
                {"vocab", std::move(vocab)},
                {"merges", std::move(merges)}};
  t["decoder"] = {{"type", "ByteLevel"}};
  const bool aps = Flag(config, "add_prefix_space", false);
  Defaults d;
  if (cls == "GPT2Tokenizer") {
    t["normalizer"] = nullptr;
    t["pre_tokenizer"] = ByteLevelPre(aps, true);
    d.bos = d.eos = d.unk = "<|endoftext|>";
  } else {
    t["normalizer"] = {{"type", "NFC"}};
    t["pre_tokenizer"] = {{"type", "Sequence"},
                          {"pretokenizers", json::array({{{"type", "Split"},
                                                          {"pattern", {{"Regex", kQwen2Regex}}},
                                                          {"behavior", "Isolated"},
                                                          {"invert", false}},
                                                         ByteLevelPre(aps, false)})}};
    d.eos = d.unk = d.pad = "<|endoftext|>";
  }
  ASSIGN_OR_RETURN(c.added, ConfigAddedTokens(config, dir + "/tokenizer_config.json"));
  AddNamedSpecials(config, d, true, &c);
  return c;
}

}  // namespace loom::tokenizer
