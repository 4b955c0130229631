// Tokenizer: tokenizer.json parsing and the encode / decode pipeline of HF tokenizers
// (added tokens → normalizer → added tokens on normalized text → pre-tokenizer → BPE → post).
#include "tokenizer/tokenizer.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "base/file.h"
#include "tokenizer/unicode.h"

namespace loom::tokenizer {

namespace {

using nlohmann::json;

// Regular files only (a FIFO would block, /dev/zero never ends), at most 256 MiB.
StatusOr<std::string> ReadFile(const std::string& path) {
  return ReadFileBounded(path, kMaxRequestFileBytes);
}

StatusOr<json> ParseJsonFile(const std::string& path) {
  ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return InvalidArgument(path + " is not valid JSON");
  return j;
}

// bos_token / eos_token: a string or an AddedToken object.
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
  const std::string cls = config.value("tokenizer_class", std::string());
  if (cls == "GPT2Tokenizer" || cls == "GPT2TokenizerFast") {
    const json& aps = config.value("add_prefix_space", json());
    if (!aps.is_null() && !aps.is_boolean()) return;
    (*j)["pre_tokenizer"] = {{"type", "ByteLevel"},
                             {"add_prefix_space", aps.is_boolean() && aps.get<bool>()},
                             {"trim_offsets", true},
                             {"use_regex", true}};
    return;
  }
  if (cls != "LlamaTokenizer" && cls != "LlamaTokenizerFast") return;
  if (!config.contains("legacy") || config["legacy"] != false) return;
  const json& n = j->value("normalizer", json());
  const json& pre = j->value("pre_tokenizer", json());
  const std::string meta = "\xE2\x96\x81";
  const bool llama2 =
      pre.is_null() && n.is_object() && n.value("type", "") == "Sequence" &&
      n.contains("normalizers") && n["normalizers"].size() == 2 &&
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
  ASSIGN_OR_RETURN(json j, ParseJsonFile(path));
  auto t = Build(j, json());
  if (!t.ok()) return InvalidArgument(path + ": " + t.status().message());
  return t;
}

StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromJson(std::string_view text) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return InvalidArgument("tokenizer.json is not valid JSON");
  return Build(j, json());
}

StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromModelDir(const std::string& dir) {
  namespace fs = std::filesystem;
  const std::string path = (fs::path(dir) / "tokenizer.json").string();
  if (!fs::exists(path)) {
    return NotFound(dir + " has no tokenizer.json (loom reads the tokenizers-library format; a "
                    "folder with only vocab.json + merges.txt or tokenizer.model needs converting)");
  }
  ASSIGN_OR_RETURN(json j, ParseJsonFile(path));
  json config;
  const fs::path config_path = fs::path(dir) / "tokenizer_config.json";
  if (fs::exists(config_path)) {
    ASSIGN_OR_RETURN(config, ParseJsonFile(config_path.string()));
  }
  if (config.is_object()) UseTransformersPipeline(config, &j);
  json extra = json::array();
  if (config.is_object() && config.contains("added_tokens_decoder") &&
      config["added_tokens_decoder"].is_object()) {
    for (const auto& [id, token] : config["added_tokens_decoder"].items()) {
      json t = token;
      t["id"] = std::stoll(id);
      extra.push_back(t);
    }
  }
  auto built = Build(j, extra);
  if (!built.ok()) return InvalidArgument(path + ": " + built.status().message());
  std::unique_ptr<Tokenizer> t = std::move(built).value();
  TokenizerConfig& c = t->config_;
  c.raw = config;
  if (config.is_object()) {
    c.bos_token = TokenString(config, "bos_token");
    c.eos_token = TokenString(config, "eos_token");
  }
  return t;
}

StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::Build(const json& j, const json& extra_added) {
  try {
    if (!j.is_object()) return InvalidArgument("expected a JSON object");
    if (!j.contains("model")) return InvalidArgument("missing \"model\"");
    std::unique_ptr<Tokenizer> t(new Tokenizer());
    ASSIGN_OR_RETURN(t->model_, BpeModel::FromJson(j["model"]));
    ASSIGN_OR_RETURN(t->normalizer_, ParseNormalizer(j.value("normalizer", json())));
    ASSIGN_OR_RETURN(t->pre_tokenizer_, ParsePreTokenizer(j.value("pre_tokenizer", json())));
    ASSIGN_OR_RETURN(t->post_processor_, ParsePostProcessor(j.value("post_processor", json())));
    ASSIGN_OR_RETURN(t->decoder_, ParseDecoder(j.value("decoder", json())));
    t->id_limit_ = t->model_->id_limit();
    RETURN_IF_ERROR(t->AddTokens(j.value("added_tokens", json::array()), false));
    if (extra_added.is_array()) RETURN_IF_ERROR(t->AddTokens(extra_added, true));
    t->BuildMatchers();
    return t;
  } catch (const json::exception& e) {
    return InvalidArgument(std::string("malformed tokenizer.json: ") + e.what());
  }
}

Status Tokenizer::AddTokens(const json& list, bool from_config) {
  if (!list.is_array()) return InvalidArgument("\"added_tokens\" must be a list");
  const int32_t model_vocab_size = static_cast<int32_t>(model_->id_limit());
  std::vector<AddedToken> specials, others;
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
    a.special = item.value("special", false);
    a.lstrip = item.value("lstrip", false);
    a.rstrip = item.value("rstrip", false);
    a.single_word = item.value("single_word", false);
    a.normalized = item.value("normalized", !a.special);
    if (a.content.empty() || added_by_content_.count(a.content)) continue;
    // Same as HF AddedVocabulary::add_tokens: a token the model knows keeps the model's id;
    // a new one gets the next id after the vocab (the file's "id" is only checked by HF).
    int32_t id = model_->TokenToId(a.content);
    if (id < 0) {
      int32_t max_added = -1;
      for (const auto& [added_id, index] : added_by_id_) max_added = std::max(max_added, added_id);
      id = max_added < 0 ? model_vocab_size
                         : (max_added >= model_vocab_size ? max_added + 1 : model_vocab_size);
    }
    a.id = id;
    added_by_id_[id] = added_.size();
    added_by_content_[a.content] = added_.size();
    added_.push_back(a);
    id_limit_ = std::max(id_limit_, id + 1);
  }
  return OkStatus();
}

void Tokenizer::BuildMatchers() {
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
    if (normalizer_) normalizer_->Normalize(&p);
    normalized_patterns.push_back(std::move(p));
  }
  raw_matcher_ = std::make_unique<AddedTokenMatcher>(&raw_tokens_, std::move(raw_patterns));
  normalized_matcher_ =
      std::make_unique<AddedTokenMatcher>(&normalized_tokens_, std::move(normalized_patterns));
}

Status Tokenizer::EncodePiece(std::string_view text, bool at_start, std::vector<PreToken>* scratch,
                              std::vector<int32_t>* ids) const {
  scratch->clear();
  scratch->push_back({std::string(text), at_start});
  if (pre_tokenizer_) pre_tokenizer_->PreTokenize(scratch);
  for (const PreToken& p : *scratch) RETURN_IF_ERROR(model_->Tokenize(p.text, ids));
  return OkStatus();
}

StatusOr<std::vector<int32_t>> Tokenizer::Encode(std::string_view text,
                                                 bool add_special_tokens) const {
  if (!IsValidUtf8(text)) return InvalidArgument("text to encode is not valid UTF-8");
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
    if (normalizer_) normalizer_->Normalize(&normalized);
    if (normalized.empty()) continue;
    inner.clear();
    normalized_matcher_->Split(normalized, &inner);
    for (const TextSegment& s : inner) {
      if (s.id >= 0) {
        ids.push_back(s.id);
      } else if (s.end > s.begin) {
        const bool at_start = seg.begin == 0 && s.begin == 0;
        RETURN_IF_ERROR(EncodePiece(std::string_view(normalized).substr(s.begin, s.end - s.begin),
                                    at_start, &scratch, &ids));
      }
    }
  }
  if (add_special_tokens && post_processor_) post_processor_->AddSpecialTokens(&ids);
  return ids;
}

std::string Tokenizer::Decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids) {
    const std::string* token = IdToToken(id);
    if (token == nullptr) continue;
    if (skip_special_tokens) {
      auto it = added_by_content_.find(*token);
      if (it != added_by_content_.end() && added_[it->second].special) continue;
    }
    tokens.push_back(*token);
  }
  if (!decoder_) {
    std::string out;
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (i) out += ' ';
      out += tokens[i];
    }
    return out;
  }
  decoder_->DecodeChain(&tokens);
  std::string out;
  for (const std::string& t : tokens) out += t;
  return out;
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
