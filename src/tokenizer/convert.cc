// Slow-tokenizer files → tokenizer.json, following transformers 5 (models/*/tokenization_*.py,
// TokenizersBackend.convert_to_native_format, SpmConverter.build_tokenizer_from_spm_proto).
#include "tokenizer/convert.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <system_error>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "tokenizer/bpe_model.h"
#include "tokenizer/json_limits.h"
#include "tokenizer/unicode.h"

namespace loom::tokenizer {

namespace {

using nlohmann::json;

const char* const kMeta = "\xE2\x96\x81";  // "▁"

// Qwen2Tokenizer's PRETOKENIZE_REGEX.
const char* const kQwen2Regex =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+"
    "[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

// The special-token attributes transformers registers, in its order.
const char* const kSpecialKeys[] = {"bos_token", "eos_token", "unk_token", "sep_token",
                                    "pad_token", "cls_token", "mask_token"};

// A config key that is present (possibly null).
bool Has(const json& config, const char* key) { return config.is_object() && config.contains(key); }

// A boolean flag: absent → `fallback`; null → `if_null` (Python's None is falsy).
bool Flag(const json& config, const char* key, bool fallback, bool if_null = false) {
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

// Class defaults for the named special tokens (null: none).
struct Defaults {
  const char* bos = nullptr;
  const char* eos = nullptr;
  const char* unk = nullptr;
  const char* pad = nullptr;
  const char* mask = nullptr;
};

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

// Code-point boundaries of `s` (valid UTF-8), excluding 0 and s.size().
std::vector<size_t> InnerBoundaries(std::string_view s) {
  std::vector<size_t> out;
  size_t pos = 0;
  NextCodePoint(s, &pos);
  while (pos < s.size()) {
    out.push_back(pos);
    NextCodePoint(s, &pos);
  }
  return out;
}

// transformers' generate_merges(vocab) without scores: every split of every piece into two
// pieces, ordered by the merged piece's id, then by the left part's length.
json MergesById(const StringMap<int32_t>& vocab) {
  std::vector<std::tuple<int32_t, size_t, std::string_view, std::string_view>> merges;
  for (const auto& [piece, id] : vocab) {
    const std::string_view p(piece);
    for (size_t cut : InnerBoundaries(p)) {
      const std::string_view l = p.substr(0, cut), r = p.substr(cut);
      if (vocab.find(l) != vocab.end() && vocab.find(r) != vocab.end()) {
        merges.emplace_back(id, cut, l, r);
      }
    }
  }
  std::sort(merges.begin(), merges.end(), [](const auto& a, const auto& b) {
    return std::tie(std::get<0>(a), std::get<1>(a)) < std::tie(std::get<0>(b), std::get<1>(b));
  });
  json out = json::array();
  for (const auto& m : merges) out.push_back(json::array({std::get<2>(m), std::get<3>(m)}));
  return out;
}

// Escapes `piece` for a PCRE2 pattern (each ASCII non-alphanumeric byte gets a backslash).
std::string EscapeRegex(std::string_view piece) {
  std::string out;
  for (unsigned char ch : piece) {
    if (ch < 0x80 && !std::isalnum(ch)) out += '\\';
    out += static_cast<char>(ch);
  }
  return out;
}

std::string EncodeBase64(std::string_view bytes) {
  static const char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  for (size_t i = 0; i < bytes.size(); i += 3) {
    uint32_t v = static_cast<uint32_t>(static_cast<uint8_t>(bytes[i])) << 16;
    if (i + 1 < bytes.size()) v |= static_cast<uint32_t>(static_cast<uint8_t>(bytes[i + 1])) << 8;
    if (i + 2 < bytes.size()) v |= static_cast<uint8_t>(bytes[i + 2]);
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += i + 1 < bytes.size() ? kAlphabet[(v >> 6) & 63] : '=';
    out += i + 2 < bytes.size() ? kAlphabet[v & 63] : '=';
  }
  return out;
}

// T5Tokenizer: the pieces plus `extra_ids` sentinels (<extra_id_N>, N descending) as a Unigram
// with unk_id 2, the charsmap, WhitespaceSplit + Metaspace, "$A </s>" always.
StatusOr<Converted> ConvertT5(const SpModel& sp, const json& config, json config_added,
                              json spm_added, const std::string& path) {
  int64_t extra_ids = 100;
  if (Has(config, "extra_ids")) {
    const json& e = config["extra_ids"];
    if (!e.is_number_integer() || e.get<int64_t>() < 0 || e.get<int64_t>() > 100000) {
      return InvalidArgument(path + ": tokenizer_config.json extra_ids " + e.dump() +
                             " is not a count in [0, 100000]");
    }
    extra_ids = e.get<int64_t>();
  }
  Converted c;
  json& t = c.tokenizer;
  t = {{"version", "1.0"}, {"added_tokens", json::array()}, {"post_processor", nullptr}};
  json vocab = json::array();
  for (const SpPiece& p : sp.pieces) {
    vocab.push_back(json::array({p.piece, static_cast<double>(p.score)}));
  }
  for (int64_t i = extra_ids - 1; i >= 0; --i) {
    vocab.push_back(json::array({"<extra_id_" + std::to_string(i) + ">", 0.0}));
  }
  t["model"] = {{"type", "Unigram"}, {"unk_id", 2}, {"vocab", vocab}, {"byte_fallback", false}};
  t["normalizer"] = sp.precompiled_charsmap.empty()
                        ? json()
                        : json{{"type", "Precompiled"},
                               {"precompiled_charsmap", EncodeBase64(sp.precompiled_charsmap)}};
  json meta = {
      {"type", "Metaspace"}, {"replacement", kMeta}, {"prepend_scheme", "always"}, {"split", true}};
  t["pre_tokenizer"] = {{"type", "Sequence"},
                        {"pretokenizers", json::array({{{"type", "WhitespaceSplit"}}, meta})}};
  t["decoder"] = meta;
  c.added = std::move(config_added);
  Defaults d;
  d.eos = "</s>", d.unk = "<unk>", d.pad = "<pad>";
  AddNamedSpecials(config, d, false, &c);
  for (json& a : spm_added) c.added.push_back(std::move(a));
  for (int64_t i = 0; i < extra_ids; ++i) {
    c.added.push_back({{"content", "<extra_id_" + std::to_string(i) + ">"},
                       {"special", true},
                       {"normalized", false}});
  }
  c.add_bos = false;
  c.add_eos = true;
  c.eos_token = "</s>";
  return c;
}

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

StatusOr<Converted> ConvertSentencePiece(const SpModel& sp, const json& config,
                                         const std::string& path) {
  const std::string cls = TokenizerClass(config);
  const bool llama = cls == "LlamaTokenizer", gemma = cls == "GemmaTokenizer";
  const bool t5 = cls == "T5Tokenizer";
  const bool generic =
      cls.empty() || cls == "TokenizersBackend" || cls == "PreTrainedTokenizerFast";
  if (!llama && !gemma && !t5 && !generic) {
    return InvalidArgument(path + ": tokenizer_class '" + cls +
                           "' with tokenizer.model is not supported by loom (supported: "
                           "LlamaTokenizer, GemmaTokenizer, T5Tokenizer, TokenizersBackend; or "
                           "add a "
                           "tokenizer.json)");
  }
  const std::string config_path = "tokenizer_config.json";
  Converted c;
  ASSIGN_OR_RETURN(json config_added, ConfigAddedTokens(config, config_path));
  json& t = c.tokenizer;
  t = {{"version", "1.0"}, {"added_tokens", json::array()}, {"post_processor", nullptr}};
  // The pieces as a dict piece → id (a repeated piece keeps its last id).
  StringMap<int32_t> vocab;
  vocab.reserve(sp.pieces.size());
  for (size_t i = 0; i < sp.pieces.size(); ++i) vocab[sp.pieces[i].piece] = static_cast<int32_t>(i);
  auto vocab_json = [&]() {
    json v = json::object();
    for (const auto& [piece, id] : vocab) v[piece] = id;
    return v;
  };
  // SentencePieceExtractor: control pieces are special added tokens, user-defined ones plain.
  json spm_added = json::array();
  for (const SpPiece& p : sp.pieces) {
    if (p.type != kSpControl && p.type != kSpUserDefined) continue;
    spm_added.push_back(
        {{"content", p.piece}, {"special", p.type == kSpControl}, {"normalized", false}});
  }
  if (t5) return ConvertT5(sp, config, std::move(config_added), std::move(spm_added), path);
  if (llama || gemma) {
    c.added = std::move(config_added);
    Defaults d;
    if (llama) {
      d.unk = "<unk>", d.bos = "<s>", d.eos = "</s>";
    } else {
      d.unk = "<unk>", d.bos = "<bos>", d.eos = "<eos>", d.pad = "<pad>", d.mask = "<mask>";
    }
    AddNamedSpecials(config, d, false, &c);
    for (json& a : spm_added) c.added.push_back(std::move(a));
    t["model"] = {{"type", "BPE"},         {"dropout", nullptr},     {"fuse_unk", true},
                  {"byte_fallback", true}, {"ignore_merges", false}, {"merges", MergesById(vocab)},
                  {"vocab", vocab_json()}};
    if (llama) {
      t["model"]["unk_token"] = nullptr;
      const bool aps = Flag(config, "add_prefix_space", true, true);
      const bool legacy = Flag(config, "legacy", false, false);
      t["normalizer"] = nullptr;
      t["pre_tokenizer"] = Metaspace(aps ? (legacy ? "always" : "first") : "never");
      json decoders = json::array(
          {Replace({{"String", kMeta}}, " "), {{"type", "ByteFallback"}}, {{"type", "Fuse"}}});
      if (aps) decoders.push_back(StripLeftSpace());
      t["decoder"] = {{"type", "Sequence"}, {"decoders", decoders}};
    } else {
      t["model"]["unk_token"] = Content(SpecialValue(config, "unk_token", d));
      t["normalizer"] = Replace({{"String", " "}}, kMeta);
      t["pre_tokenizer"] = {{"type", "Split"},
                            {"pattern", {{"String", " "}}},
                            {"behavior", "MergedWithPrevious"},
                            {"invert", false}};
      t["decoder"] = {{"type", "Sequence"},
                      {"decoders", json::array({Replace({{"String", kMeta}}, " "),
                                                {{"type", "ByteFallback"}},
                                                {{"type", "Fuse"}}})}};
    }
    return c;
  }
  // TokenizersBackend: SpmConverter.build_tokenizer_from_spm_proto, following the model's own
  // normalizer spec.
  const bool legacy = Flag(config, "legacy", true, false);
  const bool unigram = sp.model_type == 1;
  std::vector<std::string> user_defined;
  if (unigram) {
    json v = json::array();
    for (const SpPiece& p : sp.pieces)
      v.push_back(json::array({p.piece, static_cast<double>(p.score)}));
    if (sp.unk_id < 0 || static_cast<size_t>(sp.unk_id) >= sp.pieces.size()) {
      return InvalidArgument(path + ": trainer_spec.unk_id " + std::to_string(sp.unk_id) +
                             " is not a piece id (" + std::to_string(sp.pieces.size()) +
                             " pieces)");
    }
    t["model"] = {{"type", "Unigram"},
                  {"unk_id", sp.unk_id},
                  {"vocab", std::move(v)},
                  {"byte_fallback", sp.byte_fallback}};
    for (const SpPiece& p : sp.pieces) {
      if (p.type == kSpUserDefined) user_defined.push_back(p.piece);
    }
  } else {
    // added_tokens_decoder renames pieces by id, unless the new name is a piece keeping its id.
    std::unordered_map<int32_t, std::string> names;
    for (const json& a : config_added)
      names[a["id"].get<int32_t>()] = a["content"].get<std::string>();
    if (!names.empty()) {
      StringMap<int32_t> kept;
      for (const auto& [piece, id] : vocab) {
        if (!names.count(id)) kept[piece] = id;
      }
      StringMap<int32_t> renamed;
      for (const auto& [piece, id] : vocab) {
        auto it = names.find(id);
        renamed[it != names.end() && !kept.count(it->second) ? it->second : piece] = id;
      }
      vocab = std::move(renamed);
    }
    std::unordered_map<int32_t, std::string> id_to_token;
    for (const auto& [piece, id] : vocab) id_to_token[id] = piece;
    // Merges of normal pieces ranked by score (highest first), then id.
    StringMap<std::pair<float, int32_t>> normal;
    for (size_t i = 0; i < sp.pieces.size(); ++i) {
      auto it = id_to_token.find(static_cast<int32_t>(i));
      if (it == id_to_token.end()) continue;
      if (sp.pieces[i].type == kSpUserDefined) user_defined.push_back(it->second);
      if (sp.pieces[i].type == kSpNormal)
        normal[it->second] = {sp.pieces[i].score, static_cast<int32_t>(i)};
    }
    std::vector<std::tuple<float, int32_t, std::string_view, std::string_view>> ranked;
    for (const auto& [token, rank] : normal) {
      const std::string_view p(token);
      for (size_t cut : InnerBoundaries(p)) {
        const std::string_view l = p.substr(0, cut), r = p.substr(cut);
        if (normal.find(l) != normal.end() && normal.find(r) != normal.end()) {
          ranked.emplace_back(-rank.first, rank.second, l, r);
        }
      }
    }
    std::sort(ranked.begin(), ranked.end());
    json merges = json::array();
    for (const auto& m : ranked) merges.push_back(json::array({std::get<2>(m), std::get<3>(m)}));
    t["model"] = {{"type", "BPE"},
                  {"dropout", nullptr},
                  {"unk_token", sp.unk_piece},
                  {"fuse_unk", true},
                  {"byte_fallback", sp.byte_fallback},
                  {"ignore_merges", !user_defined.empty()},
                  {"merges", std::move(merges)},
                  {"vocab", vocab_json()}};
  }
  json norms = json::array();
  if (!sp.precompiled_charsmap.empty()) {
    norms.push_back(
        {{"type", "Precompiled"}, {"precompiled_charsmap", EncodeBase64(sp.precompiled_charsmap)}});
  }
  if (sp.remove_extra_whitespaces) {
    norms.push_back(Replace({{"Regex", "\\A +| +\\z"}}, ""));
    norms.push_back(Replace({{"Regex", " {2,}"}}, " "));
  }
  if (sp.escape_whitespaces) norms.push_back(Replace({{"String", " "}}, kMeta));
  if (sp.add_dummy_prefix && legacy) {
    norms.push_back(Replace({{"Regex", std::string("\\A") + kMeta}}, std::string(kMeta) + kMeta));
  }
  t["normalizer"] = {{"type", "Sequence"}, {"normalizers", norms}};
  json pres = json::array();
  if (sp.add_dummy_prefix) pres.push_back(Metaspace(legacy ? "always" : "first"));
  if (!user_defined.empty()) {
    std::vector<std::string> sorted = user_defined;
    std::stable_sort(sorted.begin(), sorted.end(), [](const std::string& a, const std::string& b) {
      return a.size() > b.size();
    });
    std::string pattern;
    for (const std::string& u : sorted) {
      if (!pattern.empty()) pattern += '|';
      pattern += EscapeRegex(u);
    }
    pres.push_back({{"type", "Split"},
                    {"pattern", {{"Regex", pattern}}},
                    {"behavior", "Isolated"},
                    {"invert", false}});
  }
  t["pre_tokenizer"] = pres.empty() ? json() : json{{"type", "Sequence"}, {"pretokenizers", pres}};
  json decoders = json::array({Replace({{"String", kMeta}}, " ")});
  if (sp.byte_fallback) decoders.push_back({{"type", "ByteFallback"}});
  if (sp.add_dummy_prefix) {
    decoders.push_back({{"type", "Fuse"}});
    decoders.push_back(StripLeftSpace());
  } else if (sp.byte_fallback) {
    decoders.push_back({{"type", "Fuse"}});
  }
  t["decoder"] = {{"type", "Sequence"}, {"decoders", decoders}};
  // Added tokens: the config's (matched on raw text when there is a dummy prefix), the named
  // special tokens (defaults from the model's trainer spec), then control pieces.
  for (json& a : config_added) {
    if (sp.add_dummy_prefix) a["normalized"] = false;
    c.added.push_back(std::move(a));
  }
  Defaults d;
  if (sp.bos_id >= 0) d.bos = sp.bos_piece.c_str();
  if (sp.eos_id >= 0) d.eos = sp.eos_piece.c_str();
  if (sp.unk_id >= 0) d.unk = sp.unk_piece.c_str();
  AddNamedSpecials(config, d, false, &c);
  for (json& a : spm_added) {
    if (!a["special"].get<bool>()) continue;  // user-defined pieces are split out above
    c.added.push_back(std::move(a));
  }
  return c;
}

}  // namespace loom::tokenizer
