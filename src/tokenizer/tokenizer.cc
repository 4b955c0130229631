// Tokenizer: tokenizer.json parsing and the encode / decode pipeline of HF tokenizers
// (added tokens → normalizer → added tokens on normalized text → pre-tokenizer → model → post),
// and the model-folder loading of every tokenizer form (convert.h for the slow-tokenizer files).
#include "tokenizer/tokenizer.h"

#include <charconv>
#include <cstdio>
#include <filesystem>
#include <new>
#include <optional>
#include <system_error>

#include "base/file.h"
#include "base/no_throw.h"
#include "tokenizer/cancel.h"
#include "tokenizer/convert.h"
#include "tokenizer/json_limits.h"
#include "tokenizer/regex.h"
#include "tokenizer/sentencepiece_model.h"
#include "tokenizer/unicode.h"

namespace loom::tokenizer {

namespace {

using nlohmann::json;

// Regular files only (a FIFO would block, /dev/zero never ends), at most 256 MiB; the JSON
// nesting is checked before parsing.
StatusOr<json> ParseJsonFile(const std::string& path) {
  ASSIGN_OR_RETURN(std::string text, ReadFileBounded(path, kMaxRequestFileBytes));
  return ParseJsonText(text, path);
}


// A string field of an object, or `fallback` when absent or of another type.
std::string StringField(const json& j, const char* key, const std::string& fallback = "") {
  if (!j.is_object()) return fallback;
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : fallback;
}

// bos_token, eos_token, ...: a string or an AddedToken object.
std::string TokenString(const json& config, const char* key) {
  auto it = config.find(key);
  if (it == config.end()) return "";
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) {
    return (*it)["content"].get<std::string>();
  }
  return "";
}

// transformers 5's LlamaTokenizer with legacy=false does not run the Llama-2 file's
// Prepend("▁") + Replace(" ", "▁") normalizer: it uses Metaspace(prepend_scheme="first",
// split=false) and no normalizer (checked on TinyLlama and Phi-3). The difference shows after
// special tokens and on leading spaces ("<|user|>\nhi": "hi", not "▁hi").
//
// Likewise transformers 5's GPT2Tokenizer replaces the file's pre-tokenizer with
// ByteLevel(add_prefix_space from the config, default false): SmolLM's Digits split is dropped.
void UseTransformersPipeline(const json& config, json* j) {
  if (!config.is_object() || !j->is_object()) return;
  // transformers would fail on a non-string class; loom keeps tokenizer.json's pipeline.
  const std::string cls = StringField(config, "tokenizer_class");
  if (cls == "GPT2Tokenizer" || cls == "GPT2TokenizerFast") {
    const json aps = config.contains("add_prefix_space") ? config["add_prefix_space"] : json();
    if (!aps.is_null() && !aps.is_boolean()) return;
    (*j)["pre_tokenizer"] = {{"type", "ByteLevel"},
                             {"add_prefix_space", aps.is_boolean() && aps.get<bool>()},
                             {"trim_offsets", true},
                             {"use_regex", true}};
    return;
  }
  if (cls != "LlamaTokenizer" && cls != "LlamaTokenizerFast") return;
  if (!config.contains("legacy") || config["legacy"] != false) return;
  const json n = j->contains("normalizer") ? (*j)["normalizer"] : json();
  const json pre = j->contains("pre_tokenizer") ? (*j)["pre_tokenizer"] : json();
  const std::string meta = "\xE2\x96\x81";
  const bool llama2 =
      pre.is_null() && n.is_object() && StringField(n, "type") == "Sequence" &&
      n.contains("normalizers") && n["normalizers"].is_array() && n["normalizers"].size() == 2 &&
      n["normalizers"][0] == json{{"type", "Prepend"}, {"prepend", meta}} &&
      n["normalizers"][1] ==
          json{{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", meta}};
  if (!llama2) return;
  (*j)["normalizer"] = nullptr;
  (*j)["pre_tokenizer"] = {
      {"type", "Metaspace"}, {"replacement", meta}, {"prepend_scheme", "first"}, {"split", false}};
}

}  // namespace

StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromFile(const std::string& path) {
  return NoThrow(path, [&]() -> StatusOr<std::unique_ptr<Tokenizer>> {
    ASSIGN_OR_RETURN(json j, ParseJsonFile(path));
    auto t = Build(j, json());
    if (!t.ok()) return Status(t.status().code(), path + ": " + t.status().message());
    return t;
  });
}

StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromJson(std::string_view text) {
  return NoThrow("tokenizer.json", [&]() -> StatusOr<std::unique_ptr<Tokenizer>> {
    ASSIGN_OR_RETURN(json j, ParseJsonText(text, "tokenizer.json"));
    return Build(j, json());
  });
}


StatusOr<bool> HasTokenizerFiles(const std::string& dir) {
  for (const char* name : {"tokenizer.json", "tokenizer.model", "vocab.json", "merges.txt"}) {
    ASSIGN_OR_RETURN(const bool has, RegularFileExists((std::filesystem::path(dir) / name).string()));
    if (has) return true;
  }
  return false;
}

StatusOr<TokenizerMode> ParseTokenizerMode(std::string_view name) {
  if (name == "auto") return TokenizerMode::kAuto;
  if (name == "tokenizers") return TokenizerMode::kTokenizers;
  return InvalidArgument("--tokenizer-mode '" + std::string(name) +
                         "' is not a mode (auto: as transformers 5's AutoTokenizer; "
                         "tokenizers: tokenizer.json as the tokenizers library reads it)");
}

StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromModelDir(const std::string& dir,
                                                             TokenizerMode mode) {
  return NoThrow(dir, [&]() -> StatusOr<std::unique_ptr<Tokenizer>> {
    namespace fs = std::filesystem;
    auto in_dir = [&](const char* name) { return (fs::path(dir) / name).string(); };
    const std::string path = in_dir("tokenizer.json");
    const std::string config_path = in_dir("tokenizer_config.json");
    std::optional<std::string> config_text;
    ASSIGN_OR_RETURN(const bool has_config, RegularFileExists(config_path));
    if (has_config) {
      ASSIGN_OR_RETURN(config_text, ReadTextFile(config_path));
    }
    // Absent → convert the slow-tokenizer files; a loop, FIFO or folder in its place → an error
    // naming it.
    ASSIGN_OR_RETURN(const bool has_tokenizer, RegularFileExists(path));
    if (has_tokenizer) {
      ASSIGN_OR_RETURN(std::string text, ReadTextFile(path));
      return FromTexts(text, path, config_text, config_path, mode);
    }
    json config;
    if (config_text) {
      ASSIGN_OR_RETURN(config, ParseJsonText(*config_text, config_path));
    }
    const std::string model_path = in_dir("tokenizer.model");
    const std::string vocab_path = in_dir("vocab.json"), merges_path = in_dir("merges.txt");
    ASSIGN_OR_RETURN(const bool has_model, RegularFileExists(model_path));
    ASSIGN_OR_RETURN(const bool has_vocab, RegularFileExists(vocab_path));
    ASSIGN_OR_RETURN(const bool has_merges, RegularFileExists(merges_path));
    const std::string cls = TokenizerClass(config);
    Converted converted;
    if (ReadsVocabMerges(cls) || (!has_model && (has_vocab || has_merges))) {
      if (!has_vocab || !has_merges) {
        return NotFound(dir + " has no tokenizer.json and no " +
                        (has_vocab ? "merges.txt" : "vocab.json") +
                        " (a byte-level BPE tokenizer" +
                        (cls.empty() ? std::string() : " (" + cls + ")") +
                        " needs vocab.json and merges.txt)");
      }
      ASSIGN_OR_RETURN(std::string vocab, ReadFileBounded(vocab_path, kMaxRequestFileBytes));
      ASSIGN_OR_RETURN(std::string merges, ReadFileBounded(merges_path, kMaxRequestFileBytes));
      ASSIGN_OR_RETURN(converted, ConvertVocabMerges(vocab, merges, config, dir));
    } else if (has_model) {
      ASSIGN_OR_RETURN(std::string bytes, ReadFileBounded(model_path, kMaxRequestFileBytes));
      ASSIGN_OR_RETURN(SpModel sp, ParseSentencePieceModel(bytes, model_path));
      ASSIGN_OR_RETURN(converted, ConvertSentencePiece(sp, config, model_path));
    } else {
      return NotFound(dir + " has no tokenizer.json, tokenizer.model, or vocab.json + merges.txt "
                      "(loom builds the tokenizer from one of them)");
    }
    const std::string what =
        dir + " (converted from " +
        (has_model && !ReadsVocabMerges(cls) ? "tokenizer.model" : "vocab.json + merges.txt") + ")";
    return FromConverted(std::move(converted), std::move(config), what);
  });
}

StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromConverted(Converted converted, json config,
                                                               const std::string& what) {
  auto built = Build(converted.tokenizer, converted.added);
  if (!built.ok()) return Status(built.status().code(), what + ": " + built.status().message());
  std::unique_ptr<Tokenizer> t = std::move(built).value();
  if (converted.add_bos || converted.add_eos) {
    const int32_t bos = converted.add_bos ? t->TokenToId(converted.bos_token) : -1;
    const int32_t eos = converted.add_eos ? t->TokenToId(converted.eos_token) : -1;
    if ((converted.add_bos && bos < 0) || (converted.add_eos && eos < 0)) {
      return InvalidArgument(what + ": add_bos_token / add_eos_token name a token ('" +
                             (bos < 0 ? converted.bos_token : converted.eos_token) +
                             "') the vocab lacks");
    }
    t->post_processor_ = MakeBosEosPostProcessor(bos, eos);
  }
  t->SetConfig(std::move(config));
  return t;
}

StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromSentencePiece(
    std::string_view model_bytes, std::optional<std::string_view> tokenizer_config_json) {
  return NoThrow("tokenizer.model", [&]() -> StatusOr<std::unique_ptr<Tokenizer>> {
    json config;
    if (tokenizer_config_json) {
      ASSIGN_OR_RETURN(config, ParseJsonText(*tokenizer_config_json, "tokenizer_config.json"));
    }
    ASSIGN_OR_RETURN(SpModel sp, ParseSentencePieceModel(model_bytes, "tokenizer.model"));
    ASSIGN_OR_RETURN(Converted c, ConvertSentencePiece(sp, config, "tokenizer.model"));
    return FromConverted(std::move(c), std::move(config), "tokenizer.model");
  });
}

StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromVocabMerges(
    std::string_view vocab_json, std::string_view merges_txt,
    std::optional<std::string_view> tokenizer_config_json) {
  return NoThrow("vocab.json", [&]() -> StatusOr<std::unique_ptr<Tokenizer>> {
    json config;
    if (tokenizer_config_json) {
      ASSIGN_OR_RETURN(config, ParseJsonText(*tokenizer_config_json, "tokenizer_config.json"));
    }
    ASSIGN_OR_RETURN(Converted c, ConvertVocabMerges(vocab_json, merges_txt, config, "."));
    return FromConverted(std::move(c), std::move(config), "vocab.json + merges.txt");
  });
}

StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromJsonTexts(
    std::string_view tokenizer_json, std::optional<std::string_view> tokenizer_config_json,
    TokenizerMode mode) {
  return NoThrow("tokenizer.json", [&]() -> StatusOr<std::unique_ptr<Tokenizer>> {
    return FromTexts(tokenizer_json, "tokenizer.json", tokenizer_config_json,
                     "tokenizer_config.json", mode);
  });
}

StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromTexts(
    std::string_view text, const std::string& path, std::optional<std::string_view> config_text,
    const std::string& config_path, TokenizerMode mode) {
  ASSIGN_OR_RETURN(json j, ParseJsonText(text, path));
  json config;
  if (config_text) {
    ASSIGN_OR_RETURN(config, ParseJsonText(*config_text, config_path));
  }
  // The tokenizers library reads tokenizer.json alone; transformers 5 rebuilds some pipelines
  // and adds tokenizer_config.json's added tokens.
  json extra = json::array();
  if (mode == TokenizerMode::kAuto) {
    UseTransformersPipeline(config, &j);
    ASSIGN_OR_RETURN(extra, ConfigAddedTokens(config, config_path));
  }
  auto built = Build(j, extra);
  if (!built.ok()) return Status(built.status().code(), path + ": " + built.status().message());
  std::unique_ptr<Tokenizer> t = std::move(built).value();
  t->SetConfig(std::move(config));
  return t;
}

void Tokenizer::SetConfig(json config) {
  config_.raw = std::move(config);
  if (config_.raw.is_object()) {
    config_.bos_token = TokenString(config_.raw, "bos_token");
    config_.eos_token = TokenString(config_.raw, "eos_token");
    for (const char* name : {"bos_token", "eos_token", "unk_token", "sep_token", "pad_token",
                             "cls_token", "mask_token"}) {
      std::string content = TokenString(config_.raw, name);
      if (!content.empty()) config_.special_tokens.emplace_back(name, std::move(content));
    }
  }
}

namespace {
// vLLM's get_leading_space_marker: a Metaspace pre-tokenizer's replacement (alone or the first
// in a Sequence), whose leading instance a one-token decode strips; "" for any other.
std::string LeadingSpaceMarker(const json& pre) {
  auto marker = [](const json& m) -> std::string {
    auto it = m.find("replacement");
    return it != m.end() && it->is_string() ? it->get<std::string>() : "\xE2\x96\x81";
  };
  if (!pre.is_object()) return "";
  const auto type = pre.find("type");
  if (type == pre.end() || !type->is_string()) return "";
  if (*type == "Metaspace") return marker(pre);
  if (*type != "Sequence") return "";
  const auto subs = pre.find("pretokenizers");
  if (subs == pre.end() || !subs->is_array()) return "";
  for (const json& sub : *subs) {
    if (sub.is_object() && sub.value("type", json()) == "Metaspace") return marker(sub);
  }
  return "";
}
}  // namespace

StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::Build(const json& j, const json& extra_added) {
  try {
    if (!j.is_object()) return InvalidArgument("expected a JSON object");
    if (!j.contains("model")) return InvalidArgument("missing \"model\"");
    std::unique_ptr<Tokenizer> t(new Tokenizer());
    const json null;
    auto field = [&](const char* key) -> const json& {
      auto it = j.find(key);
      return it == j.end() ? null : *it;
    };
    ASSIGN_OR_RETURN(t->model_, ParseModel(j["model"]));
    ASSIGN_OR_RETURN(t->normalizer_, ParseNormalizer(field("normalizer")));
    ASSIGN_OR_RETURN(t->pre_tokenizer_, ParsePreTokenizer(field("pre_tokenizer")));
    t->leading_space_marker_ = LeadingSpaceMarker(field("pre_tokenizer"));
    ASSIGN_OR_RETURN(t->post_processor_, ParsePostProcessor(field("post_processor")));
    ASSIGN_OR_RETURN(t->decoder_, ParseDecoder(field("decoder")));
    t->id_limit_ = t->model_->id_limit();
    const json& added = field("added_tokens");
    RETURN_IF_ERROR(t->AddTokens(added.is_null() ? json::array() : added, false));
    if (extra_added.is_array()) RETURN_IF_ERROR(t->AddTokens(extra_added, true));
    RETURN_IF_ERROR(t->BuildMatchers());
    return t;
  } catch (const json::exception& e) {
    return InvalidArgument(std::string("malformed tokenizer.json: ") + e.what());
  }
}

namespace {

// An optional boolean flag of an added token: `fallback` when absent, an error naming the
// token when present with another type.
StatusOr<bool> TokenFlag(const json& item, const char* key, bool fallback,
                         const std::string& content) {
  auto it = item.find(key);
  if (it == item.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) {
    return InvalidArgument("added token '" + content + "': \"" + key + "\" must be a boolean");
  }
  return it->get<bool>();
}

}  // namespace

Status Tokenizer::AddTokens(const json& list, bool from_config) {
  if (!list.is_array()) return InvalidArgument("\"added_tokens\" must be a list");
  const int32_t model_vocab_size = static_cast<int32_t>(model_->id_limit());
  for (const json& item : list) {
    AddedToken a;
    if (!item.is_object() || !item.contains("content") || !item["content"].is_string()) {
      return InvalidArgument("added token without string \"content\": " + item.dump());
    }
    a.content = item["content"].get<std::string>();
    // The HF library requires these fields in tokenizer.json; transformers' config may omit some.
    for (const char* key : {"single_word", "lstrip", "rstrip", "normalized"}) {
      if (!from_config && (!item.contains(key) || !item[key].is_boolean())) {
        return InvalidArgument("added token '" + a.content + "': missing boolean field \"" + key +
                               "\"");
      }
    }
    ASSIGN_OR_RETURN(a.special, TokenFlag(item, "special", false, a.content));
    ASSIGN_OR_RETURN(a.lstrip, TokenFlag(item, "lstrip", false, a.content));
    ASSIGN_OR_RETURN(a.rstrip, TokenFlag(item, "rstrip", false, a.content));
    ASSIGN_OR_RETURN(a.single_word, TokenFlag(item, "single_word", false, a.content));
    ASSIGN_OR_RETURN(a.normalized, TokenFlag(item, "normalized", !a.special, a.content));
    if (a.content.empty() || added_by_content_.count(a.content)) continue;
    // Same as HF AddedVocabulary::add_tokens: a token the model knows keeps the model's id;
    // a new one gets the next id after the vocab (the file's "id" is only checked by HF).
    // max_added_id_ keeps this O(1) per token (150k added tokens load in linear time).
    int32_t id = model_->TokenToId(a.content);
    if (id < 0) {
      id = max_added_id_ >= model_vocab_size ? max_added_id_ + 1 : model_vocab_size;
      if (id > kMaxTokenId) {
        return InvalidArgument("added token '" + a.content + "': id " + std::to_string(id) +
                               " exceeds the largest token id " + std::to_string(kMaxTokenId));
      }
    }
    a.id = id;
    max_added_id_ = std::max(max_added_id_, id);
    added_by_id_[id] = added_.size();
    added_by_content_[a.content] = added_.size();
    added_.push_back(a);
    id_limit_ = std::max(id_limit_, id + 1);
  }
  return OkStatus();
}

Status Tokenizer::BuildMatchers() {
  // HF matches special tokens before the others (its pattern order).
  raw_tokens_.clear();
  normalized_tokens_.clear();
  for (int pass = 0; pass < 2; ++pass) {
    for (const AddedToken& a : added_) {
      if (a.special != (pass == 0)) continue;
      (a.normalized ? normalized_tokens_ : raw_tokens_).push_back(a);
    }
  }
  std::vector<std::string> raw_patterns, normalized_patterns;
  for (const AddedToken& a : raw_tokens_) raw_patterns.push_back(a.content);
  for (const AddedToken& a : normalized_tokens_) {
    std::string p = a.content;
    if (normalizer_) {
      Status st = normalizer_->Normalize(&p, NormalizedLimit(p.size()));
      if (!st.ok()) return Status(st.code(), "added token '" + a.content + "': " + st.message());
    }
    normalized_patterns.push_back(std::move(p));
  }
  raw_matcher_ = std::make_unique<AddedTokenMatcher>(&raw_tokens_, std::move(raw_patterns));
  normalized_matcher_ =
      std::make_unique<AddedTokenMatcher>(&normalized_tokens_, std::move(normalized_patterns));
  return OkStatus();
}

Status Tokenizer::EncodePiece(std::string_view text, bool at_start, size_t max_bytes,
                              std::vector<PreToken>* scratch, std::vector<int32_t>* ids) const {
  scratch->clear();
  scratch->push_back({std::string(text), at_start});
  if (pre_tokenizer_) RETURN_IF_ERROR(pre_tokenizer_->PreTokenize(scratch, max_bytes));
  for (const PreToken& p : *scratch) {
    if (EncodeCancelled()) return EncodeCancelledError("the pre-tokens");
    RETURN_IF_ERROR(model_->Tokenize(p.text, ids));
  }
  return OkStatus();
}

StatusOr<std::vector<int32_t>> Tokenizer::Encode(std::string_view text,
                                                 bool add_special_tokens) const {
  return NoThrow("encode", [&]() -> StatusOr<std::vector<int32_t>> {
    if (text.size() > kMaxEncodeBytes) {
      return InvalidArgument("text to encode has " + std::to_string(text.size()) +
                             " bytes; the limit is " + std::to_string(kMaxEncodeBytes));
    }
    if (!IsValidUtf8(text)) return InvalidArgument("text to encode is not valid UTF-8");
    RegexBudgetScope regex_budget(text.size());  // file-borne patterns: bounded CPU per call
    std::vector<int32_t> ids;
    ids.reserve(text.size() / 3 + 4);
    std::vector<TextSegment> segments, inner;
    raw_matcher_->Split(text, &segments);
    std::vector<PreToken> scratch;
    std::string normalized;
    for (const TextSegment& seg : segments) {
      if (seg.id >= 0) {
        ids.push_back(seg.id);
        continue;
      }
      if (seg.end <= seg.begin) continue;
      normalized.assign(text.substr(seg.begin, seg.end - seg.begin));
      // Normalizing and pre-tokenizing may grow a piece by a bounded factor (NormalizedLimit).
      const size_t max_bytes = NormalizedLimit(normalized.size());
      // Bytes of the normalized text tied to the input's first character (Normalizer::
      // NormalizeTracked); tracked for the segment at the start only.
      size_t head = 0;
      if (seg.begin == 0) {
        size_t next = 0;
        NextCodePoint(normalized, &next);
        head = next;
      }
      if (normalizer_)
        RETURN_IF_ERROR(normalizer_->NormalizeTracked(&normalized, max_bytes, &head));
      if (normalized.empty()) continue;
      inner.clear();
      normalized_matcher_->Split(normalized, &inner);
      for (const TextSegment& s : inner) {
        if (s.id >= 0) {
          ids.push_back(s.id);
        } else if (s.end > s.begin) {
          const bool at_start = s.begin == 0 && head > 0;
          RETURN_IF_ERROR(
              EncodePiece(std::string_view(normalized).substr(s.begin, s.end - s.begin), at_start,
                          max_bytes, &scratch, &ids));
        }
      }
    }
    if (add_special_tokens && post_processor_) post_processor_->AddSpecialTokens(&ids);
    return ids;
  });
}

std::string Tokenizer::Decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  try {
    std::vector<std::string> tokens;
    tokens.reserve(ids.size());
    size_t bytes = 0;
    for (int32_t id : ids) {
      const std::string* token = IdToToken(id);
      if (token == nullptr) continue;
      if (skip_special_tokens) {
        auto it = added_by_content_.find(*token);
        if (it != added_by_content_.end() && added_[it->second].special) continue;
      }
      tokens.push_back(*token);
      bytes += token->size();
    }
    if (!decoder_) {
      std::string out;
      for (size_t i = 0; i < tokens.size(); ++i) {
        if (i) out += ' ';
        out += tokens[i];
      }
      return out;
    }
    // A Replace decoder may grow the text by the same bounded factor as a normalizer.
    decoder_->DecodeChain(&tokens, NormalizedLimit(bytes));
    std::string out;
    for (const std::string& t : tokens) out += t;
    return out;
  } catch (const std::bad_alloc&) {
    // Decode cannot report an error; with the growth bound above only real memory exhaustion
    // gets here, and an empty text is the safe answer.
    return std::string();
  }
}

StatusOr<std::string> Tokenizer::DecodeChecked(std::span<const int32_t> ids,
                                               bool skip_special_tokens) const {
  size_t bytes = 0;
  for (int32_t id : ids) {
    const std::string* token = IdToToken(id);
    if (token != nullptr) bytes += token->size();
  }
  RegexBudgetScope budget(bytes);
  std::string text = Decode(ids, skip_special_tokens);
  if (budget.exhausted()) {
    char seconds[32];
    std::snprintf(
        seconds, sizeof(seconds), "%.1f", RegexBudgetScope::SecondsFor(bytes));
    return ResourceExhausted(
        "decoding " + std::to_string(ids.size()) +
        " tokens ran out of the tokenizer's time budget (" + seconds +
        " s of CPU): a tokenizer.json decoder pattern that backtracks on every match?");
  }
  return text;
}

int32_t Tokenizer::TokenToId(std::string_view token) const {
  auto it = added_by_content_.find(token);
  if (it != added_by_content_.end()) return added_[it->second].id;
  return model_->TokenToId(token);
}

const std::string* Tokenizer::IdToToken(int32_t id) const {
  auto it = added_by_id_.find(id);
  if (it != added_by_id_.end()) return &added_[it->second].content;
  return model_->IdToToken(id);
}

bool Tokenizer::IsSpecial(int32_t id) const {
  const std::string* token = IdToToken(id);
  if (token == nullptr) return false;
  auto it = added_by_content_.find(*token);
  return it != added_by_content_.end() && added_[it->second].special;
}

}  // namespace loom::tokenizer
