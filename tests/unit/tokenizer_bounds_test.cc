// Tokenizer files whose sizes multiply per request or at load: a post-processor repeating the
// prompt, BPE affixes copied per character, an lstrip walk over the whole text, merges generated
// from a crafted tokenizer.model. Each is refused by name at load or runs in linear time.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "tokenizer/tokenizer.h"
#include "unit/tokenizer_test_util.h"

namespace loom::tokenizer {
namespace {

using test::TinyByteLevel;

namespace fs = std::filesystem;
using nlohmann::json;

bool Contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

json Template(int sequences, int specials) {
  json single = json::array();
  json special_tokens = json::object();
  for (int i = 0; i < specials; ++i) {
    const std::string name = "<s" + std::to_string(i) + ">";
    single.push_back({{"SpecialToken", {{"id", name}, {"type_id", 0}}}});
    special_tokens[name] = {{"id", name}, {"ids", json::array({i % 90})}, {"tokens", {name}}};
  }
  for (int i = 0; i < sequences; ++i) single.push_back({{"Sequence", {{"id", "A"}, {"type_id", 0}}}});
  return {{"type", "TemplateProcessing"},
          {"single", single},
          {"pair", json::array()},
          {"special_tokens", special_tokens}};
}

TEST(TokenizerBounds, APostProcessorCannotRepeatThePrompt) {
  // 85 templates that each doubled the ids: one prompt token became 2^85 ids.
  json j = TinyByteLevel(/*ab_merge=*/false);
  j["post_processor"] = {{"type", "Sequence"},
                         {"processors", json::array({Template(2, 0), Template(2, 0)})}};
  auto t = Tokenizer::FromJson(j.dump());
  ASSERT_FALSE(t.ok());
  EXPECT_TRUE(Contains(t.status().message(), "holds the sequence more than once"))
      << t.status().message();

  j["post_processor"] = Template(1, 300);
  t = Tokenizer::FromJson(j.dump());
  ASSERT_FALSE(t.ok());
  EXPECT_TRUE(Contains(t.status().message(), "more than 256 special token ids"))
      << t.status().message();

  // What real templates do still works: two specials around one sequence, in a Sequence.
  j["post_processor"] = {{"type", "Sequence"},
                         {"processors", json::array({Template(1, 2), Template(1, 1)})}};
  t = Tokenizer::FromJson(j.dump());
  ASSERT_TRUE(t.ok()) << t.status().message();
  auto ids = (*t)->Encode("ab", true);
  ASSERT_TRUE(ids.ok()) << ids.status().message();
  EXPECT_EQ(*ids, (std::vector<int32_t>{0, 0, 1, 'a' - 33, 'b' - 33}));
}

TEST(TokenizerBounds, BpeAffixesAndUnkTokenAreBounded) {
  for (const auto& [key, limit] : {std::pair<const char*, int>{"continuing_subword_prefix", 16},
                                   {"end_of_word_suffix", 16},
                                   {"unk_token", 256}}) {
    json j = TinyByteLevel(/*ab_merge=*/false);
    j["model"][key] = std::string(1 << 20, 'a');  // copied (and hashed) for every character
    auto t = Tokenizer::FromJson(j.dump());
    ASSERT_FALSE(t.ok()) << key;
    EXPECT_TRUE(Contains(t.status().message(), std::string("\"") + key +
                                                   "\" is 1048576 bytes long (at most " +
                                                   std::to_string(limit) + ")"))
        << t.status().message();
    j["model"][key] = std::string(static_cast<size_t>(limit), '#');  // the limit itself loads
    EXPECT_TRUE(Tokenizer::FromJson(j.dump()).ok()) << key;
  }
  json j = TinyByteLevel(/*ab_merge=*/false);
  j["model"]["continuing_subword_prefix"] = "##";
  j["model"]["unk_token"] = "!";
  ASSERT_TRUE(Tokenizer::FromJson(j.dump()).ok());
}

TEST(TokenizerBounds, AnLstripTokenOverLongWhitespaceIsLinear) {
  // Each match walked back over every space before it: 5e11 steps for this text.
  json j = TinyByteLevel(/*ab_merge=*/false);
  j["added_tokens"] = json::array({{{"id", 95},
                                    {"content", " "},
                                    {"special", false},
                                    {"single_word", false},
                                    {"lstrip", true},
                                    {"rstrip", false},
                                    {"normalized", false}}});
  auto t = Tokenizer::FromJson(j.dump());
  ASSERT_TRUE(t.ok()) << t.status().message();
  const std::string text = "a" + std::string(1 << 20, ' ') + "b";
  auto ids = (*t)->Encode(text, false);
  ASSERT_TRUE(ids.ok()) << ids.status().message();
  ASSERT_EQ(ids->size(), text.size());
  EXPECT_EQ(ids->front(), 'a' - 33);
  EXPECT_EQ((*ids)[1], 95);
  EXPECT_EQ(ids->back(), 'b' - 33);
}

// Protobuf of a SentencePiece ModelProto: pieces only (field 1: piece, score, type).
std::string Varint(uint64_t v) {
  std::string out;
  for (; v >= 0x80; v >>= 7) out += static_cast<char>((v & 0x7F) | 0x80);
  return out + static_cast<char>(v);
}
std::string Len(uint32_t field, const std::string& bytes) {
  return Varint((uint64_t{field} << 3) | 2) + Varint(bytes.size()) + bytes;
}
std::string Piece(const std::string& piece, int type) {
  return Len(1, Len(1, piece) + Varint((2 << 3) | 5) + std::string("\0\0\0\0", 4) +
                    Varint(3 << 3) + Varint(static_cast<uint64_t>(type)));
}

// A Llama tokenizer.model whose pieces are a^i b^j (1 <= i + j <= n): every split of a piece is
// a merge, ~n^3 / 3 of them for ~n^2 / 2 pieces.
std::string WriteLlamaModel(const std::string& name, int n) {
  const fs::path dir = fs::path(testing::TempDir()) / ("loom_tok_bounds_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::string model = Piece("<unk>", 2) + Piece("<s>", 3) + Piece("</s>", 3);
  for (int s = 1; s <= n; ++s) {
    for (int i = 0; i <= s; ++i) model += Piece(std::string(i, 'a') + std::string(s - i, 'b'), 1);
  }
  std::ofstream(dir / "tokenizer.model", std::ios::binary) << model;
  std::ofstream(dir / "tokenizer_config.json") << R"({"tokenizer_class": "LlamaTokenizer"})";
  return dir.string();
}

TEST(TokenizerBounds, MergesGeneratedFromATokenizerModelAreBounded) {
  // 6,218 pieces generating 449,625 merges (at most 16 per piece + 65,536 = 165,024).
  const std::string big = WriteLlamaModel("big", 110);
  auto t = Tokenizer::FromModelDir(big);
  ASSERT_FALSE(t.ok());
  EXPECT_TRUE(Contains(t.status().message(), "generate more than 165024 BPE merges"))
      << t.status().message();
  fs::remove_all(big);

  const std::string small = WriteLlamaModel("small", 12);
  t = Tokenizer::FromModelDir(small);
  ASSERT_TRUE(t.ok()) << t.status().message();
  auto ids = (*t)->Encode("aab", false);
  ASSERT_TRUE(ids.ok()) << ids.status().message();
  EXPECT_FALSE(ids->empty());
  fs::remove_all(small);
}

}  // namespace
}  // namespace loom::tokenizer
