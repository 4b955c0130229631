// SentencePiece tokenizer.model → tokenizer.json as transformers 5 builds it: LlamaTokenizer,
// GemmaTokenizer, T5Tokenizer and TokenizersBackend (SpmConverter.build_tokenizer_from_spm_proto).
#include <algorithm>
#include <cctype>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "tokenizer/bpe_model.h"
#include "tokenizer/convert.h"
#include "tokenizer/convert_util.h"
#include "tokenizer/unicode.h"

namespace loom::tokenizer {

namespace {

using nlohmann::json;
using namespace convert_detail;

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

// Merges a tokenizer.model may generate: every split of every piece whose halves are pieces is
// one, so a crafted vocab (all short strings over two letters: 4 Mi pieces, a 126 MB file) would
// generate ~80 M, tens of GB as JSON. Real vocabs generate about 2 per piece (Llama 2: 61,249
// for 32,000 pieces); at most 16 per piece (plus 64 Ki), and 8 Mi in all.
size_t MaxGeneratedMerges(size_t pieces) {
  return std::min<size_t>(size_t{1} << 23, 16 * pieces + (size_t{1} << 16));
}

Status TooManyMerges(size_t limit) {
  return InvalidArgument("tokenizer.model: its pieces generate more than " +
                         std::to_string(limit) + " BPE merges");
}

// transformers' generate_merges(vocab) without scores: every split of every piece into two
// pieces, ordered by the merged piece's id, then by the left part's length.
StatusOr<json> MergesById(const StringMap<int32_t>& vocab) {
  std::vector<std::tuple<int32_t, size_t, std::string_view, std::string_view>> merges;
  const size_t limit = MaxGeneratedMerges(vocab.size());
  for (const auto& [piece, id] : vocab) {
    const std::string_view p(piece);
    for (size_t cut : InnerBoundaries(p)) {
      const std::string_view l = p.substr(0, cut), r = p.substr(cut);
      if (vocab.find(l) != vocab.end() && vocab.find(r) != vocab.end()) {
        if (merges.size() == limit) return TooManyMerges(limit);
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
    ASSIGN_OR_RETURN(json merges, MergesById(vocab));
    t["model"] = {{"type", "BPE"},         {"dropout", nullptr},     {"fuse_unk", true},
                  {"byte_fallback", true}, {"ignore_merges", false}, {"merges", std::move(merges)},
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
    const size_t limit = MaxGeneratedMerges(normal.size());
    for (const auto& [token, rank] : normal) {
      const std::string_view p(token);
      for (size_t cut : InnerBoundaries(p)) {
        const std::string_view l = p.substr(0, cut), r = p.substr(cut);
        if (normal.find(l) != normal.end() && normal.find(r) != normal.end()) {
          if (ranked.size() == limit) return TooManyMerges(limit);
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
