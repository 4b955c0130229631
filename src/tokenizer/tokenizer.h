// Tokenizer: loads a model folder's tokenizer.json (+ tokenizer_config.json), or its
// vocab.json + merges.txt / tokenizer.model, and encodes / decodes exactly as HF does.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/status.h"
#include "tokenizer/added_vocabulary.h"
#include "tokenizer/bpe_model.h"
#include "tokenizer/convert.h"
#include "tokenizer/model.h"
#include "tokenizer/decoder.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/post_processor.h"
#include "tokenizer/pre_tokenizer.h"

namespace loom::tokenizer {

// What tokenizer_config.json adds to the tokenizer.json pipeline. The chat template is loaded
// and rendered by tokenizer/chat_template.h (LoadChatTemplate), with bos/eos from here.
struct TokenizerConfig {
  std::string bos_token;  // empty when unset
  std::string eos_token;
  // transformers' special_tokens_map, what a chat template sees: (bos_token, "<s>"), ... for each
  // of bos, eos, unk, sep, pad, cls and mask_token the config sets (the Mistral and Llama 2
  // templates read unk_token; undefined, it rendered as "").
  std::vector<std::pair<std::string, std::string>> special_tokens;
  nlohmann::json raw;  // the whole tokenizer_config.json (null when the file is absent)
};

// How a model folder's tokenizer is built. kAuto: as transformers 5's AutoTokenizer (the
// default: its pipeline rebuilds and tokenizer_config.json's added tokens). kTokenizers:
// tokenizer.json exactly as the HF tokenizers library reads it (Tokenizer.from_file), what
// transformers 4 and adapters trained with it saw. Folders without tokenizer.json are converted
// as transformers 5 converts them in both modes.
enum class TokenizerMode { kAuto, kTokenizers };
// "auto" / "tokenizers" (the --tokenizer-mode flag).
StatusOr<TokenizerMode> ParseTokenizerMode(std::string_view name);

// Whether `dir` holds files a tokenizer can be built from: tokenizer.json, tokenizer.model, or
// vocab.json / merges.txt (errors: a loop, FIFO or folder in a file's place).
StatusOr<bool> HasTokenizerFiles(const std::string& dir);

// Longest text Encode accepts (positions inside the BPE merge loop are 32-bit); memory stays
// linear in the text below it.
inline constexpr size_t kMaxEncodeBytes = size_t{1} << 30;

// Immutable after load except for the BPE word cache (internally locked): Encode and Decode
// may run on many threads at once.
class Tokenizer {
 public:
  // The tokenizers library's Tokenizer.from_file: tokenizer.json alone. Truncation and padding
  // in the file are ignored, as transformers ignores them.
  static StatusOr<std::unique_ptr<Tokenizer>> FromFile(const std::string& path);
  static StatusOr<std::unique_ptr<Tokenizer>> FromJson(std::string_view text);
  // A model folder, encoding as transformers' AutoTokenizer does (kAuto): DIR/tokenizer.json
  // plus tokenizer_config.json's added_tokens_decoder entries missing from tokenizer.json
  // (transformers adds them), bos/eos, and for LlamaTokenizer with legacy=false the pipeline
  // transformers 5 builds (Metaspace "first" instead of the Prepend normalizer).
  // add_bos_token / add_eos_token are not applied: transformers 5 keeps tokenizer.json's
  // post-processor for them too (checked with LlamaTokenizer and TokenizersBackend).
  // Without tokenizer.json: vocab.json + merges.txt (GPT2Tokenizer, Qwen2Tokenizer) or a
  // SentencePiece tokenizer.model (LlamaTokenizer, GemmaTokenizer, T5Tokenizer, TokenizersBackend)
  // converted as transformers 5 converts them (tokenizer/convert.h), add_bos_token / add_eos_token
  // applied; a folder with none of them is kNotFound naming what is missing.
  static StatusOr<std::unique_ptr<Tokenizer>> FromModelDir(
      const std::string& dir, TokenizerMode mode = TokenizerMode::kAuto);
  // FromModelDir on texts already read: tokenizer.json and, when given, tokenizer_config.json.
  static StatusOr<std::unique_ptr<Tokenizer>> FromJsonTexts(
      std::string_view tokenizer_json, std::optional<std::string_view> tokenizer_config_json,
      TokenizerMode mode = TokenizerMode::kAuto);

  // The conversions of FromModelDir on files already read: a SentencePiece tokenizer.model, or
  // vocab.json + merges.txt, with tokenizer_config.json when given.
  static StatusOr<std::unique_ptr<Tokenizer>> FromSentencePiece(
      std::string_view model_bytes, std::optional<std::string_view> tokenizer_config_json);
  static StatusOr<std::unique_ptr<Tokenizer>> FromVocabMerges(
      std::string_view vocab_json, std::string_view merges_txt,
      std::optional<std::string_view> tokenizer_config_json);

  // `text` must be valid UTF-8 (and at most kMaxEncodeBytes). add_special_tokens runs the
  // post-processor (e.g. adds BOS). Errors: a normalizer or pre-tokenizer output past its growth
  // bound (NormalizedLimit), a pre-tokenizer regex that gives up (catastrophic backtracking).
  StatusOr<std::vector<int32_t>> Encode(std::string_view text, bool add_special_tokens) const;
  // Unknown ids are skipped (as HF does); invalid byte sequences become U+FFFD.
  std::string Decode(std::span<const int32_t> ids, bool skip_special_tokens) const;
  // Decode under a CPU-time budget for the decoder's patterns (RegexBudgetScope), for callers
  // with request-sized id lists (/detokenize): kResourceExhausted when a tokenizer.json decoder
  // pattern spends it, instead of a text with some replacements silently left out.
  StatusOr<std::string> DecodeChecked(std::span<const int32_t> ids, bool skip_special_tokens) const;

  // -1 when absent (added tokens first, then the model vocab).
  int32_t TokenToId(std::string_view token) const;
  // Null when the id has no token.
  const std::string* IdToToken(int32_t id) const;
  bool IsSpecial(int32_t id) const;
  // One past the largest id of the model vocab and the added tokens.
  int32_t id_limit() const { return id_limit_; }
  const std::vector<AddedToken>& added_tokens() const { return added_; }
  const TokenizerConfig& config() const { return config_; }
  // vLLM's leading-space marker: a Metaspace pre-tokenizer's replacement ("▁"), whose leading
  // instance a one-token decode strips; empty for other pre-tokenizers.
  const std::string& leading_space_marker() const { return leading_space_marker_; }

 private:
  Tokenizer() = default;
  static StatusOr<std::unique_ptr<Tokenizer>> FromTexts(
      std::string_view text, const std::string& path,
      std::optional<std::string_view> config_text, const std::string& config_path,
      TokenizerMode mode);
  void SetConfig(nlohmann::json config);
  // Builds a converted folder (tokenizer/convert.h); `what` names the source in errors.
  static StatusOr<std::unique_ptr<Tokenizer>> FromConverted(Converted converted,
                                                            nlohmann::json config,
                                                            const std::string& what);
  static StatusOr<std::unique_ptr<Tokenizer>> Build(const nlohmann::json& j,
                                                    const nlohmann::json& extra_added);
  Status AddTokens(const nlohmann::json& list, bool from_config);
  Status BuildMatchers();
  Status EncodePiece(std::string_view text, bool at_start, size_t max_bytes,
                     std::vector<PreToken>* scratch, std::vector<int32_t>* ids) const;

  std::unique_ptr<Model> model_;
  std::unique_ptr<Normalizer> normalizer_;
  std::unique_ptr<PreTokenizer> pre_tokenizer_;
  std::string leading_space_marker_;
  std::unique_ptr<PostProcessor> post_processor_;
  std::unique_ptr<Decoder> decoder_;
  std::vector<AddedToken> added_;  // special tokens first (HF's matching priority)
  std::unordered_map<int32_t, size_t> added_by_id_;
  StringMap<size_t> added_by_content_;
  std::unique_ptr<AddedTokenMatcher> raw_matcher_;         // normalized == false
  std::unique_ptr<AddedTokenMatcher> normalized_matcher_;  // normalized == true
  std::vector<AddedToken> raw_tokens_, normalized_tokens_;
  int32_t id_limit_ = 0;
  int32_t max_added_id_ = -1;  // largest id given to an added token so far
  TokenizerConfig config_;
};

}  // namespace loom::tokenizer
