// Shared tokenizer test helpers: a tiny byte-level BPE tokenizer.json (one id per printable ASCII
// byte), reading a fixture file, ids as text for messages.
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

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

// A file's bytes ("" when it cannot be read).
inline std::string ReadAll(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Ids as "1 2 3 " for a failure message.
inline std::string Show(const std::vector<int32_t>& ids) {
  std::string s;
  for (int32_t id : ids) s += std::to_string(id) + " ";
  return s;
}

}  // namespace loom::tokenizer::test
