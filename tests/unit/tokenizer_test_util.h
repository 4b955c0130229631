// Shared tokenizer test fixture: a tiny byte-level BPE tokenizer.json (one id per printable ASCII
// byte).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace loom::tokenizer::test {

// Printable ASCII bytes are ids 0..93, "Ġ" (a space under ByteLevel) 94; with `ab_merge`, the
// merge "a b" makes "ab" id 95.
inline nlohmann::json TinyByteLevel(bool ab_merge = true) {
  nlohmann::json vocab = nlohmann::json::object();
  for (int c = 33; c < 127; ++c) vocab[std::string(1, static_cast<char>(c))] = c - 33;
  vocab["\xC4\xA0"] = 94;  // "Ġ" = space
  nlohmann::json merges = nlohmann::json::array();
  if (ab_merge) {
    vocab["ab"] = 95;
    merges.push_back("a b");
  }
  return {{"version", "1.0"},
          {"added_tokens", nlohmann::json::array()},
          {"normalizer", nullptr},
          {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}}},
          {"post_processor", nullptr},
          {"decoder", {{"type", "ByteLevel"}}},
          {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}}}};
}

}  // namespace loom::tokenizer::test
