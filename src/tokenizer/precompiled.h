// SentencePiece's precompiled_charsmap (HF's "Precompiled" normalizer): a darts-clone
// double-array trie of rewrite rules over UTF-8 bytes plus their NUL-terminated outputs, applied
// per grapheme cluster as the tokenizers library (spm_precompiled) applies it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace loom::tokenizer {

class PrecompiledCharsmap {
 public:
  // Layout: u32 little-endian trie size in bytes, the trie (u32 units), the outputs (UTF-8).
  // `what` names the source in errors.
  static StatusOr<PrecompiledCharsmap> Parse(std::string_view bytes, const std::string& what);
  // The rewrite of `chunk`: the output of its shortest prefix in the trie (null when none).
  std::optional<std::string_view> Transform(std::string_view chunk) const;
  // Normalizes valid UTF-8: each grapheme shorter than 6 bytes with a rewrite is replaced
  // whole, else each character with a rewrite is replaced. kResourceExhausted past max_bytes.
  StatusOr<std::string> Apply(std::string_view text, size_t max_bytes) const;
  // How many bytes at the start of Apply(text) HF's alignments tie to the first `head` bytes of
  // `text` (see Normalizer::NormalizeTracked), replaying the library's transformation list with
  // its quirk: a removed first character is not recorded, so the next output character takes
  // its alignment ("\x0b´" → " \u0301", both tied to offset 0). Looks at the text's start only.
  size_t HeadAfterApply(std::string_view text, size_t head) const;

 private:
  // Walks `text` as Apply rewrites it: `piece(old, rewrite or null)` for each grapheme rewritten
  // whole, else for each of its characters; then `done(end)` after each grapheme, stopping when
  // it returns false.
  template <typename Piece, typename Done>
  void Walk(std::string_view text, Piece piece, Done done) const;

  std::vector<uint32_t> trie_;
  std::string normalized_;
};

// Standard base64 (with or without '=' padding); errors name `what`.
StatusOr<std::string> DecodeBase64(std::string_view text, const std::string& what);

}  // namespace loom::tokenizer
