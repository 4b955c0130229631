// Folders without tokenizer.json: vocab.json + merges.txt (GPT-2 / Qwen2 byte-level BPE) or a
// SentencePiece tokenizer.model, turned into the tokenizer.json that transformers 5's
// fast-tokenizer conversion builds for the folder's tokenizer_class.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "base/status.h"
#include "tokenizer/sentencepiece_model.h"

namespace loom::tokenizer {

// What a conversion gives Tokenizer: the pipeline, the added tokens transformers registers (in
// its order: tokenizer_config.json's added_tokens_decoder by id, then the named special tokens,
// then the SentencePiece control / user-defined pieces), and the post-processor transformers
// builds from add_bos_token / add_eos_token (TokenizersBackend.update_post_processor).
struct Converted {
  nlohmann::json tokenizer;  // tokenizer.json form, "added_tokens" and "post_processor" empty
  nlohmann::json added;      // AddedToken objects, ids only where the config gives them
  std::string bos_token, eos_token;  // empty when none
  bool add_bos = false, add_eos = false;
};

// tokenizer_config.json's added_tokens_decoder {"<id>": {AddedToken}, ...} as a list of tokens
// with their "id", sorted by id as transformers adds them. Keys are decimal ids.
StatusOr<nlohmann::json> ConfigAddedTokens(const nlohmann::json& config,
                                           const std::string& config_path);
// The tokenizer_class of a config without its "Fast" suffix ("" when absent).
std::string TokenizerClass(const nlohmann::json& config);
// Whether `cls` reads vocab.json + merges.txt (GPT2Tokenizer, Qwen2Tokenizer).
bool ReadsVocabMerges(const std::string& cls);

// vocab.json + merges.txt for GPT2Tokenizer / Qwen2Tokenizer. `dir` names the files in errors.
StatusOr<Converted> ConvertVocabMerges(std::string_view vocab_json, std::string_view merges_txt,
                                       const nlohmann::json& config, const std::string& dir);
// tokenizer.model for LlamaTokenizer, GemmaTokenizer, T5Tokenizer, or TokenizersBackend
// (transformers' SpmConverter.build_tokenizer_from_spm_proto: PreTrainedTokenizerFast or no
// class too). `path` names the file in errors.
StatusOr<Converted> ConvertSentencePiece(const SpModel& sp, const nlohmann::json& config,
                                         const std::string& path);

}  // namespace loom::tokenizer
