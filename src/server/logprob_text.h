// A token's text in log-prob entries, as vLLM 0.32 writes it (leading spaces and split characters).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace loom::server {

// vLLM 0.32's decoded token (tokenizers/detokenizer_utils.py convert_ids_list_to_tokens, then
// v1/engine/logprobs.py _verify_tokens): the token decoded alone (special tokens kept); the
// leading spaces a Metaspace decode strips from a first token put back (" Paris", not "Paris",
// on Llama 2 / Mistral: completions' text_offset then follows the text); and a text ending in
// U+FFFD — a byte of a character split over tokens — replaced by what the token completes,
// decoded with 1-4 of `context` (the sequence's ids before it), or "" while the character is
// still incomplete (the bytes of "é" read "", "é" rather than "\uFFFD", "\uFFFD").
std::string LogprobTokenText(const tokenizer::Tokenizer& tok, int32_t id,
                             std::span<const int32_t> context);

// vLLM's context for ids[i]'s text: the (up to 4) ids before it, none before ids[first] (a
// prompt's first token has no log-prob entry, so vLLM takes none from it).
std::span<const int32_t> LogprobContext(const std::vector<int32_t>& ids, size_t i, size_t first = 0);

}  // namespace loom::server
