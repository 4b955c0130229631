// Tokenizer forms beyond tokenizer.json: vocab.json + merges.txt and SentencePiece
// tokenizer.model folders against transformers (tools/ref/make_tokenizer_vectors.py --slow), the
// Unigram model, and --tokenizer-mode tokenizers against the tokenizers library.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "tokenizer/tokenizer.h"
#include "unit/tokenizer_test_util.h"

namespace loom::tokenizer {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using test::ReadAll;
using test::Show;

const fs::path kTokenizers = fs::path(LOOM_FIXTURES) / "tokenizers";
const fs::path kVectors = fs::path(LOOM_FIXTURES) / "tokenizer_vectors";

std::vector<std::string> JsonStems(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() == ".json") names.push_back(e.path().stem().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::string TestName(const testing::TestParamInfo<std::string>& info) {
  std::string name = info.param;
  for (char& c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  }
  return name;
}

// Every case of a vector file: encode with and without special tokens, decode both ways.
void CheckCases(const Tokenizer& t, const json& cases, const std::string& what) {
  int failures = 0;
  for (const json& c : cases) {
    const std::string text = c["text"].get<std::string>();
    auto ids = t.Encode(text, false);
    ASSERT_TRUE(ids.ok()) << what << ": " << ids.status().message();
    auto ids_special = t.Encode(text, true);
    ASSERT_TRUE(ids_special.ok()) << what;
    const auto want = c["ids"].get<std::vector<int32_t>>();
    const auto want_special = c["ids_special"].get<std::vector<int32_t>>();
    EXPECT_EQ(*ids, want) << what << " text: [" << text << "]\n got " << Show(*ids) << "\nwant "
                          << Show(want);
    EXPECT_EQ(*ids_special, want_special) << what << " text: [" << text << "]\n got "
                                          << Show(*ids_special) << "\nwant " << Show(want_special);
    if (c.contains("decoded")) {
      EXPECT_EQ(t.Decode(want_special, false), c["decoded"].get<std::string>())
          << what << " " << Show(want_special);
      EXPECT_EQ(t.Decode(want_special, true), c["decoded_skip"].get<std::string>())
          << what << " " << Show(want_special);
    }
    if ((*ids != want || *ids_special != want_special) && ++failures > 5) {
      FAIL() << what << ": too many mismatches";
    }
  }
}

class SlowFolderTest : public testing::TestWithParam<std::string> {};

// A folder without tokenizer.json encodes and decodes as transformers' AutoTokenizer.
TEST_P(SlowFolderTest, MatchesTransformers) {
  const json v = json::parse(ReadAll(kVectors / "slow" / (GetParam() + ".json")));
  const fs::path folder = kTokenizers / v["folder"].get<std::string>();
  ASSERT_FALSE(fs::exists(folder / "tokenizer.json")) << folder;
  for (TokenizerMode mode : {TokenizerMode::kAuto, TokenizerMode::kTokenizers}) {
    auto t = Tokenizer::FromModelDir(folder.string(), mode);
    ASSERT_TRUE(t.ok()) << t.status().message();
    CheckCases(**t, v["cases"], GetParam());
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, SlowFolderTest, testing::ValuesIn(JsonStems(kVectors / "slow")),
                         TestName);

class TokenizersModeTest : public testing::TestWithParam<std::string> {};

// --tokenizer-mode tokenizers: a model folder encodes as Tokenizer.from_file(tokenizer.json)
// (the "ids" of the library vectors), whatever tokenizer_config.json says.
TEST_P(TokenizersModeTest, FolderMatchesTheLibrary) {
  const json v = json::parse(ReadAll(kVectors / (GetParam() + ".json")));
  const std::string rel = v["tokenizer"].get<std::string>();
  const fs::path folder = (kTokenizers / rel).parent_path();
  if (!rel.ends_with("/tokenizer.json") || !fs::exists(folder / "tokenizer_config.json")) {
    GTEST_SKIP() << rel << " is not a model folder";
  }
  auto t = Tokenizer::FromModelDir(folder.string(), TokenizerMode::kTokenizers);
  ASSERT_TRUE(t.ok()) << t.status().message();
  CheckCases(**t, v["cases"], GetParam());
}

INSTANTIATE_TEST_SUITE_P(Fixtures, TokenizersModeTest, testing::ValuesIn(JsonStems(kVectors)),
                         TestName);

// The example of issue 11: TinyLlama " Hello world" keeps the Prepend normalizer's extra "▁"
// (29871) in tokenizers mode and loses it in transformers 5's rebuild.
TEST(TokenizersMode, TinyLlamaLeadingSpace) {
  const std::string dir = (kTokenizers / "TinyLlama-1.1B-Chat-v1.0").string();
  auto lib = Tokenizer::FromModelDir(dir, TokenizerMode::kTokenizers);
  auto auto_mode = Tokenizer::FromModelDir(dir);
  ASSERT_TRUE(lib.ok() && auto_mode.ok());
  EXPECT_EQ(*(*lib)->Encode(" Hello world", false), (std::vector<int32_t>{29871, 15043, 3186}));
  EXPECT_EQ(*(*auto_mode)->Encode(" Hello world", false), (std::vector<int32_t>{15043, 3186}));
  EXPECT_TRUE(ParseTokenizerMode("tokenizers").ok());
  EXPECT_TRUE(ParseTokenizerMode("auto").ok());
  EXPECT_FALSE(ParseTokenizerMode("hf").ok());
}

json UnigramJson(json vocab, json unk_id, bool byte_fallback) {
  return {{"version", "1.0"},
          {"added_tokens", json::array()},
          {"normalizer", nullptr},
          {"pre_tokenizer", nullptr},
          {"post_processor", nullptr},
          {"decoder", nullptr},
          {"model",
           {{"type", "Unigram"},
            {"unk_id", unk_id},
            {"vocab", vocab},
            {"byte_fallback", byte_fallback}}}};
}

// HF's own Unigram doc example: "abcdacdxx" → abcd a cd xx (xx fused into one unk).
TEST(Unigram, ViterbiAndFusedUnknowns) {
  const json vocab = json::array(
      {json::array({"<unk>", 0.0}), json::array({"a", 0.0}), json::array({"b", 0.0}),
       json::array({"c", 0.0}), json::array({"d", 0.0}), json::array({"cd", 1.0}),
       json::array({"ab", 2.0}), json::array({"abc", 5.0}), json::array({"abcd", 10.0})});
  auto t = Tokenizer::FromJson(UnigramJson(vocab, 0, false).dump());
  ASSERT_TRUE(t.ok()) << t.status().message();
  EXPECT_EQ(*(*t)->Encode("abcdacdxx", false), (std::vector<int32_t>{8, 1, 5, 0}));
  EXPECT_EQ(*(*t)->IdToToken(8), "abcd");
  EXPECT_EQ((*t)->TokenToId("cd"), 5);
  // No unk_id: an uncovered character is an error, not a crash.
  auto no_unk = Tokenizer::FromJson(UnigramJson(vocab, nullptr, false).dump());
  ASSERT_TRUE(no_unk.ok());
  EXPECT_FALSE((*no_unk)->Encode("x", false).ok());
  EXPECT_TRUE((*no_unk)->Encode("ab", false).ok());
}

TEST(Unigram, ByteFallback) {
  json vocab = json::array({json::array({"<unk>", 0.0}), json::array({"a", -1.0})});
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    vocab.push_back(json::array({name, -5.0}));
  }
  auto t = Tokenizer::FromJson(UnigramJson(vocab, 0, true).dump());
  ASSERT_TRUE(t.ok()) << t.status().message();
  // "é" = C3 A9 → <0xC3> <0xA9> (ids 2 + byte).
  EXPECT_EQ(*(*t)->Encode("a\xC3\xA9", false), (std::vector<int32_t>{1, 2 + 0xC3, 2 + 0xA9}));
}

TEST(Unigram, RejectsBadVocab) {
  const std::pair<json, json> cases[] = {
      {json::array({json::array({"a"})}), 0},       {json::array({json::array({1, 0.0})}), 0},
      {json::array({json::array({"a", "x"})}), 0},  {json::array({json::array({"a", 0.0})}), 5},
      {json::array({json::array({"a", 0.0})}), -1}, {json::array(), 0},
  };
  for (const auto& [vocab, unk] : cases) {
    auto t = Tokenizer::FromJson(UnigramJson(vocab, unk, false).dump());
    EXPECT_FALSE(t.ok()) << vocab.dump() << " unk " << unk.dump();
    if (!t.ok()) {
      EXPECT_NE(t.status().message().find("Unigram"), std::string::npos);
    }
  }
}

}  // namespace
}  // namespace loom::tokenizer
