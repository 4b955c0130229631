// Tokenizer loading and encoding on hostile files and inputs: every failure is a Status naming
// the file or component, never a crash, an exception, a quadratic load or an exponential blow-up.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include "tokenizer/bpe_model.h"
#include "tokenizer/json_limits.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/regex.h"
#include "tokenizer/tokenizer.h"
#include "unit/tokenizer_test_util.h"

namespace loom::tokenizer {
namespace {

using test::TinyByteLevel;

namespace fs = std::filesystem;
using nlohmann::json;

// TinyByteLevel with one Split pre-tokenizer on `regex` (isolated matches).
json WithSplit(const std::string& regex) {
  json j = TinyByteLevel();
  j["pre_tokenizer"] = {{"type", "Split"},
                        {"pattern", {{"Regex", regex}}},
                        {"behavior", "Isolated"},
                        {"invert", false}};
  return j;
}

bool Contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

// A scratch model folder under the test's temp dir.
class ModelDir {
 public:
  explicit ModelDir(const std::string& name)
      : path_(fs::path(testing::TempDir()) / ("loom_tok_hardening_" + name)) {
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~ModelDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  void Write(const std::string& file, const std::string& text) const {
    std::ofstream(path_ / file, std::ios::binary) << text;
  }
  std::string path() const { return path_.string(); }

 private:
  fs::path path_;
};

std::string Deep(size_t levels) { return std::string(levels, '[') + std::string(levels, ']'); }

TEST(TokenizerHardening, DeeplyNestedTokenizerJsonIsRefusedBeforeParsing) {
  auto t = Tokenizer::FromJson(Deep(200000));
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(t.status().message(), "tokenizer.json: JSON nested deeper than 128"))
      << t.status().message();
  // Brackets inside strings do not count.
  json j = TinyByteLevel();
  j["model"]["vocab"][std::string(500, '[')] = 96;
  EXPECT_TRUE(Tokenizer::FromJson(j.dump()).ok());
}

TEST(TokenizerHardening, DeeplyNestedFilesInAModelDirNameTheFile) {
  ModelDir dir("deep");
  dir.Write("tokenizer.json", "{\"model\": " + Deep(200000) + "}");
  auto t = Tokenizer::FromModelDir(dir.path());
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(t.status().message(), "tokenizer.json: JSON nested deeper"))
      << t.status().message();

  dir.Write("tokenizer.json", TinyByteLevel().dump());
  dir.Write("tokenizer_config.json", "{\"x\": " + Deep(200000) + "}");
  t = Tokenizer::FromModelDir(dir.path());
  ASSERT_FALSE(t.ok());
  EXPECT_TRUE(Contains(t.status().message(), "tokenizer_config.json: JSON nested deeper"))
      << t.status().message();
}

TEST(TokenizerHardening, WrongTypesInTokenizerConfigDoNotThrow) {
  ModelDir dir("config_types");
  dir.Write("tokenizer.json", TinyByteLevel().dump());
  // transformers would refuse a non-string class; loom keeps the file's pipeline.
  for (const char* config :
       {R"({"tokenizer_class": 5})", R"({"tokenizer_class": "GPT2Tokenizer", "add_prefix_space": 3})",
        R"({"tokenizer_class": "LlamaTokenizer", "legacy": false})", R"([1, 2])",
        R"({"bos_token": 5, "eos_token": {"content": 7}})"}) {
    dir.Write("tokenizer_config.json", config);
    auto t = Tokenizer::FromModelDir(dir.path());
    EXPECT_TRUE(t.ok()) << config << ": " << t.status().message();
  }
  json llama = TinyByteLevel();
  llama["pre_tokenizer"] = nullptr;
  llama["normalizer"] = {{"type", "Sequence"}, {"normalizers", {{"a", 1}, {"b", 2}}}};
  dir.Write("tokenizer.json", llama.dump());
  dir.Write("tokenizer_config.json", R"({"tokenizer_class": "LlamaTokenizer", "legacy": false})");
  auto t = Tokenizer::FromModelDir(dir.path());
  ASSERT_FALSE(t.ok());  // the normalizers are not a list: refused with a message, not thrown
  EXPECT_TRUE(Contains(t.status().message(), "tokenizer.json")) << t.status().message();
}

TEST(TokenizerHardening, AddedTokensDecoderKeysMustBeIds) {
  ModelDir dir("decoder_keys");
  dir.Write("tokenizer.json", TinyByteLevel().dump());
  for (const char* key : {"abc", "", "-1", "99999999999999999999", "12x"}) {
    dir.Write("tokenizer_config.json",
              std::string(R"({"added_tokens_decoder": {")") + key +
                  R"(": {"content": "<x>", "special": true}}})");
    auto t = Tokenizer::FromModelDir(dir.path());
    ASSERT_FALSE(t.ok()) << key;
    EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
    EXPECT_TRUE(Contains(t.status().message(),
                         std::string("added_tokens_decoder key '") + key + "' is not a token id"))
        << t.status().message();
  }
  dir.Write("tokenizer_config.json", R"({"added_tokens_decoder": {"96": {"content": "<x>"}}})");
  EXPECT_TRUE(Tokenizer::FromModelDir(dir.path()).ok());
}

TEST(TokenizerHardening, WronglyTypedTokenizerJsonFieldsAreErrorsNamingTheField) {
  const std::pair<const char*, json> cases[] = {
      {"special", {{"added_tokens",
                    {{{"id", 96}, {"content", "<x>"}, {"special", 5}, {"single_word", false},
                      {"lstrip", false}, {"rstrip", false}, {"normalized", false}}}}}},
      {"\"start\"", {{"decoder", {{"type", "Strip"}, {"content", " "}, {"start", "a"}}}}},
      {"\"start\"", {{"decoder", {{"type", "Strip"}, {"content", " "}, {"start", -1}}}}},
      {"\"suffix\"", {{"decoder", {{"type", "BPEDecoder"}, {"suffix", 1}}}}},
      {"delimiter", {{"pre_tokenizer", {{"type", "CharDelimiterSplit"}, {"delimiter", 5}}}}},
      {"\"type\"", {{"model", {{"type", 5}, {"vocab", json::object()}}}}},
      {"unknown template piece",
       {{"post_processor",
         {{"type", "TemplateProcessing"},
          {"single", {{{"SpecialToken", {{"id", 5}}}}}},
          {"special_tokens", json::object()}}}}},
      {"invalid id",
       {{"post_processor",
         {{"type", "TemplateProcessing"},
          {"single", {{{"SpecialToken", {{"id", "<s>"}}}}}},
          {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {"x"}}}}}}}}}},
      {"invalid id",
       {{"post_processor",
         {{"type", "TemplateProcessing"},
          {"single", {{{"SpecialToken", {{"id", "<s>"}}}}}},
          {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {int64_t{1} << 40}}}}}}}}}},
      {"\"cls\"", {{"post_processor", {{"type", "BertProcessing"}, {"cls", {"[CLS]", -5}},
                                      {"sep", {"[SEP]", 1}}}}}},
  };
  for (const auto& [fragment, patch] : cases) {
    json j = TinyByteLevel();
    j.merge_patch(patch);
    if (patch.contains("model")) j["model"] = patch["model"];
    auto t = Tokenizer::FromJson(j.dump());
    ASSERT_FALSE(t.ok()) << patch.dump();
    EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument) << patch.dump();
    EXPECT_TRUE(Contains(t.status().message(), fragment))
        << fragment << " in " << t.status().message();
  }
}

TEST(TokenizerHardening, VocabIdsAreCappedBeforeSizingTables) {
  json j = TinyByteLevel();
  j["model"]["vocab"]["zz"] = 2000000000;
  auto t = Tokenizer::FromJson(j.dump());
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(t.status().message(), "vocab entry 'zz' has an invalid id 2000000000"))
      << t.status().message();
  // Under the hard cap but far beyond what 97 entries can use.
  j["model"]["vocab"]["zz"] = kMaxTokenId - 1;
  t = Tokenizer::FromJson(j.dump());
  ASSERT_FALSE(t.ok());
  EXPECT_TRUE(Contains(t.status().message(), "is too large for 97 entries"))
      << t.status().message();
  // Gaps a real file has (a cropped vocab keeping its ids) are fine.
  j["model"]["vocab"]["zz"] = 50000;
  EXPECT_TRUE(Tokenizer::FromJson(j.dump()).ok());
}

TEST(TokenizerHardening, ManyAddedTokensLoadAndMatch) {
  // Was quadratic (a scan of all earlier ids per token): 150k tokens took minutes.
  // The list is written as text: building 150k json objects took longer than loading them
  // (most of a minute in the sanitized build).
  constexpr int kCount = 150000;
  std::string added = "[";
  for (int i = 0; i < kCount; ++i) {
    added += std::string(i == 0 ? "" : ",") + "{\"id\":" + std::to_string(96 + i) +
             ",\"content\":\"<t" + std::to_string(i) +
             ">\",\"special\":" + (i % 2 == 0 ? "true" : "false") +
             ",\"single_word\":false,\"lstrip\":false,\"rstrip\":false,\"normalized\":false}";
  }
  added += "]";
  std::string text = TinyByteLevel().dump();
  const std::string empty = "\"added_tokens\":[]";
  ASSERT_NE(text.find(empty), std::string::npos);
  text.replace(text.find(empty), empty.size(), "\"added_tokens\":" + added);
  auto t = Tokenizer::FromJson(text);
  ASSERT_TRUE(t.ok()) << t.status().message();
  EXPECT_EQ((*t)->id_limit(), 96 + kCount);
  auto ids = (*t)->Encode("a<t149999>b<t7>", false);
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(*ids, (std::vector<int32_t>{'a' - 33, 96 + 149999, 'b' - 33, 96 + 7}));
}

json AddedToken(int id, const std::string& content) {
  return {{"id", id},         {"content", content}, {"special", false}, {"single_word", false},
          {"lstrip", false},  {"rstrip", false},    {"normalized", false}};
}

TEST(TokenizerHardening, AddedTokenMatchingIsLinearInTheText) {
  // A forward trie walk per position cost the pattern length at each one: quadratic here.
  json j = TinyByteLevel();
  // json::array: a braced list of one json is that json itself under clang (an array under gcc).
  j["added_tokens"] = json::array({AddedToken(96, std::string(50000, 'a') + "b")});
  auto t = Tokenizer::FromJson(j.dump());
  ASSERT_TRUE(t.ok()) << t.status().message();
  std::string text(1 << 20, 'a');
  auto ids = (*t)->Encode(text, false);
  ASSERT_TRUE(ids.ok()) << ids.status().message();
  EXPECT_EQ(ids->size(), text.size());
  text.replace(600000, 50001, std::string(50000, 'a') + "b");
  ids = (*t)->Encode(text, false);
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(std::count(ids->begin(), ids->end(), 96), 1);
}

TEST(TokenizerHardening, AddedTokenMatchingIsLeftmostLongest) {
  // Random patterns and texts over {a, b, c}: the matcher agrees with a brute-force
  // leftmost-longest scan (earliest pattern on equal content).
  std::mt19937 rng(7);
  auto random_string = [&](size_t min_len, size_t max_len) {
    std::string s(std::uniform_int_distribution<size_t>(min_len, max_len)(rng), ' ');
    for (char& c : s) c = static_cast<char>('a' + std::uniform_int_distribution<int>(0, 2)(rng));
    return s;
  };
  for (int trial = 0; trial < 300; ++trial) {
    std::vector<std::string> patterns;
    const int count = std::uniform_int_distribution<int>(1, 6)(rng);
    for (int i = 0; i < count; ++i) patterns.push_back(random_string(1, 5));
    json j = TinyByteLevel();
    j["added_tokens"] = json::array();
    for (int i = 0; i < count; ++i) j["added_tokens"].push_back(AddedToken(96 + i, patterns[i]));
    auto t = Tokenizer::FromJson(j.dump());
    ASSERT_TRUE(t.ok()) << t.status().message();
    // A few texts span several 64 KiB blocks of the matcher.
    const std::string text = trial < 4 ? random_string(150000, 200000) : random_string(0, 40);
    std::vector<int32_t> expected;
    size_t gap = 0, pos = 0;
    while (pos < text.size()) {
      int best = -1;
      for (int i = 0; i < count; ++i) {
        if (text.compare(pos, patterns[i].size(), patterns[i]) == 0 &&
            (best < 0 || patterns[i].size() > patterns[best].size())) {
          best = i;
        }
      }
      if (best < 0) {
        ++pos;
        continue;
      }
      auto piece = (*t)->Encode(text.substr(gap, pos - gap), false);
      ASSERT_TRUE(piece.ok());
      expected.insert(expected.end(), piece->begin(), piece->end());
      expected.push_back((*t)->TokenToId(patterns[best]));
      pos += patterns[best].size();
      gap = pos;
    }
    auto rest = (*t)->Encode(text.substr(gap), false);
    ASSERT_TRUE(rest.ok());
    expected.insert(expected.end(), rest->begin(), rest->end());
    auto ids = (*t)->Encode(text, false);
    ASSERT_TRUE(ids.ok());
    EXPECT_EQ(*ids, expected) << "text '" << text << "', patterns " << json(patterns).dump();
  }
}

json ChainOf(int n, const json& part, const char* list_key, const char* type = "Sequence") {
  json parts = json::array();
  for (int i = 0; i < n; ++i) parts.push_back(part);
  return {{"type", type}, {list_key, parts}};
}

TEST(TokenizerHardening, ChainedGrowingNormalizersHitTheGrowthBound) {
  json j = TinyByteLevel();
  j["normalizer"] = ChainOf(
      40, {{"type", "Replace"}, {"pattern", {{"Regex", ""}}}, {"content", "ab"}}, "normalizers");
  auto t = Tokenizer::FromJson(j.dump());
  ASSERT_TRUE(t.ok()) << t.status().message();
  auto ids = (*t)->Encode("hello", false);
  ASSERT_FALSE(ids.ok());
  EXPECT_EQ(ids.status().code(), StatusCode::kResourceExhausted);
  EXPECT_TRUE(Contains(ids.status().message(), "normalizer Replace"))
      << ids.status().message();
  EXPECT_TRUE(Contains(ids.status().message(), std::to_string(NormalizedLimit(5))))
      << ids.status().message();
  // One replacement with a huge content is refused before the text is built.
  j["normalizer"] = {{"type", "Replace"},
                     {"pattern", {{"Regex", ""}}},
                     {"content", std::string(100000, 'x')}};
  t = Tokenizer::FromJson(j.dump());
  ASSERT_TRUE(t.ok());
  ids = (*t)->Encode(std::string(1000, 'a'), false);
  ASSERT_FALSE(ids.ok());
  EXPECT_TRUE(Contains(ids.status().message(), "would exceed")) << ids.status().message();
  // Prepend grows once per piece: fine; a 10 KB prepend on a short piece passes the bound.
  j["normalizer"] = ChainOf(40, {{"type", "Prepend"}, {"prepend", std::string(1000, 'p')}},
                            "normalizers");
  t = Tokenizer::FromJson(j.dump());
  ASSERT_TRUE(t.ok());
  ids = (*t)->Encode("a", false);
  ASSERT_FALSE(ids.ok());
  EXPECT_TRUE(Contains(ids.status().message(), "normalizer Prepend")) << ids.status().message();
}

TEST(TokenizerHardening, ChainedByteLevelPreTokenizersHitTheGrowthBound) {
  json j = TinyByteLevel();
  j["pre_tokenizer"] = ChainOf(40, {{"type", "ByteLevel"}, {"add_prefix_space", false}},
                               "pretokenizers");
  auto t = Tokenizer::FromJson(j.dump());
  ASSERT_TRUE(t.ok()) << t.status().message();
  auto ids = (*t)->Encode("\xC3\xA9t\xC3\xA9", false);
  ASSERT_FALSE(ids.ok());
  EXPECT_EQ(ids.status().code(), StatusCode::kResourceExhausted);
  EXPECT_TRUE(Contains(ids.status().message(), "pre_tokenizer")) << ids.status().message();
}

TEST(TokenizerHardening, GrowingDecodersAreBounded) {
  json j = TinyByteLevel();
  j["decoder"] = ChainOf(
      40, {{"type", "Replace"}, {"pattern", {{"Regex", ""}}}, {"content", "ab"}}, "decoders");
  auto t = Tokenizer::FromJson(j.dump());
  ASSERT_TRUE(t.ok()) << t.status().message();
  const std::vector<int32_t> ids = {0, 1, 2, 3};
  const std::string text = (*t)->Decode(ids, false);
  EXPECT_LE(text.size(), NormalizedLimit(4));
  EXPECT_GT(text.size(), 4u);
}

TEST(TokenizerHardening, CatastrophicBacktrackingIsAnErrorNamingThePattern) {
  auto t = Tokenizer::FromJson(WithSplit("(a+)+$").dump());
  ASSERT_TRUE(t.ok()) << t.status().message();
  auto ids = (*t)->Encode(std::string(40, 'a') + "!", false);
  ASSERT_FALSE(ids.ok());
  EXPECT_EQ(ids.status().code(), StatusCode::kResourceExhausted);
  EXPECT_TRUE(Contains(ids.status().message(), "pre_tokenizer Split: regex '(a+)+$'"))
      << ids.status().message();
  EXPECT_TRUE(Contains(ids.status().message(), "match limit")) << ids.status().message();
  // The same pattern on a text it matches quickly still works.
  EXPECT_TRUE((*t)->Encode("aaab", false).ok());
}

// A pattern that backtracks just under the per-attempt match limit at every position: each
// attempt is allowed, their number is not bounded by it. Without the CPU budget per Encode this
// 20 KB text took ~35 s (and 1 MB half an hour) and then succeeded; now it is an error after
// about RegexBudgetScope::kBaseSeconds of CPU, naming the pattern.
TEST(TokenizerHardening, APatternSlowAtEveryPositionRunsOutOfItsBudget) {
  auto t = Tokenizer::FromJson(WithSplit(".{0,1500}.{0,1500}Z|.").dump());
  ASSERT_TRUE(t.ok()) << t.status().message();
  auto ids = (*t)->Encode(std::string(20000, 'a'), false);
  ASSERT_FALSE(ids.ok());
  EXPECT_EQ(ids.status().code(), StatusCode::kResourceExhausted);
  EXPECT_TRUE(Contains(ids.status().message(), "pre_tokenizer Split: ")) << ids.status().message();
  EXPECT_TRUE(Contains(ids.status().message(), "regex '.{0,1500}.{0,1500}Z|.'"))
      << ids.status().message();
  EXPECT_TRUE(Contains(ids.status().message(), "time budget")) << ids.status().message();
  // The budget is per call: a short text on the same tokenizer right after still encodes.
  auto short_ids = (*t)->Encode("aaab", false);
  ASSERT_TRUE(short_ids.ok()) << short_ids.status().message();
  EXPECT_EQ(short_ids->size(), 4u);
}

// The same for a decoder pattern (review finding: /detokenize took ~36 ms per id of a 60-byte
// token, an 8 MiB body of ids ~16 h): DecodeChecked stops at its budget with an error; without
// it this decode took ~14 s and succeeded.
TEST(TokenizerHardening, ADecoderPatternSlowOnEveryTokenRunsOutOfItsBudget) {
  json j = TinyByteLevel();
  j["added_tokens"] = json::array({{{"id", 96},
                                    {"content", std::string(60, 'a')},
                                    {"special", false},
                                    {"single_word", false},
                                    {"lstrip", false},
                                    {"rstrip", false},
                                    {"normalized", false}}});
  j["decoder"] = {
      {"type", "Sequence"},
      {"decoders",
       json::array(
           {{{"type", "Replace"}, {"pattern", {{"Regex", "(?:a|aa)+\\d"}}}, {"content", "x"}},
            {{"type", "ByteLevel"}}})}};
  auto t = Tokenizer::FromJson(j.dump());
  ASSERT_TRUE(t.ok()) << t.status().message();
  const std::vector<int32_t> ids(400, 96);
  auto text = (*t)->DecodeChecked(ids, false);
  ASSERT_FALSE(text.ok());
  EXPECT_EQ(text.status().code(), StatusCode::kResourceExhausted);
  EXPECT_TRUE(Contains(text.status().message(),
                       "decoding 400 tokens ran out of the tokenizer's time budget"))
      << text.status().message();
  // A short list decodes, the same text as Decode.
  const std::vector<int32_t> few = {96, 0, 1};
  auto ok = (*t)->DecodeChecked(few, false);
  ASSERT_TRUE(ok.ok()) << ok.status().message();
  EXPECT_EQ(*ok, (*t)->Decode(few, false));
  EXPECT_EQ(*ok, std::string(60, 'a') + "!\"");
}

TEST(TokenizerHardening, LongInputsEncode) {
  // 4 MB of mixed text through a Qwen-style Split regex + ByteLevel: works, no error.
  json j = TinyByteLevel();
  j["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers",
       {{{"type", "Split"},
         {"pattern",
          {{"Regex",
            R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"}}},
         {"behavior", "Isolated"},
         {"invert", false}},
        {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}};
  auto t = Tokenizer::FromJson(j.dump());
  ASSERT_TRUE(t.ok()) << t.status().message();
  std::string text;
  while (text.size() < (4u << 20)) text += "ab cd, ef!  gh\n";
  auto ids = (*t)->Encode(text, false);
  ASSERT_TRUE(ids.ok()) << ids.status().message();
  EXPECT_GT(ids->size(), text.size() / 4);
  // One 1 MB word (no spaces) too.
  ids = (*t)->Encode(std::string(1 << 20, 'a'), false);
  ASSERT_TRUE(ids.ok()) << ids.status().message();
}

}  // namespace
}  // namespace loom::tokenizer

namespace loom::tokenizer {
namespace {

// Every component of a Sequence runs over every request's text: 300,000 Lowercase steps made a
// 24 KB prompt take 13 s. At most kMaxSequenceComponents (nested ones included); 40 still load.
TEST(TokenizerHardening, SequencesHaveAtMostKMaxSequenceComponents) {
  json j = TinyByteLevel();
  j["normalizer"] = ChainOf(40, {{"type", "Lowercase"}}, "normalizers");
  EXPECT_TRUE(Tokenizer::FromJson(j.dump()).ok());
  struct Case {
    const char* field;
    json component;
    const char* list_key;
  };
  for (const Case& c : {Case{"normalizer", {{"type", "Lowercase"}}, "normalizers"},
                        Case{"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}}, "pretokenizers"},
                        Case{"decoder", {{"type", "ByteLevel"}}, "decoders"}}) {
    json k = TinyByteLevel();
    k[c.field] = ChainOf(static_cast<int>(kMaxSequenceComponents) + 1, c.component, c.list_key);
    auto t = Tokenizer::FromJson(k.dump());
    ASSERT_FALSE(t.ok()) << c.field;
    EXPECT_TRUE(Contains(t.status().message(), std::string(c.field) + " Sequence: more than 256"))
        << t.status().message();
    // Nested Sequences count together.
    k[c.field] = ChainOf(20, ChainOf(20, c.component, c.list_key), c.list_key);
    EXPECT_FALSE(Tokenizer::FromJson(k.dump()).ok()) << c.field;
  }
}

// Encoding walks the piece trie up to the longest piece from every position: a 200,000-byte
// Unigram piece made a 200 KB prompt take a minute. Pieces are at most kMaxPieceBytes.
TEST(TokenizerHardening, UnigramPiecesAreAtMostKMaxPieceBytes) {
  auto unigram = [](size_t piece_bytes) {
    json vocab = json::array({json::array({"<unk>", 0.0}), json::array({"a", -1.0}),
                              json::array({std::string(piece_bytes, 'a'), -5.0})});
    return json{{"version", "1.0"},
                {"added_tokens", json::array()},
                {"normalizer", nullptr},
                {"pre_tokenizer", nullptr},
                {"post_processor", nullptr},
                {"decoder", nullptr},
                {"model", {{"type", "Unigram"}, {"unk_id", 0}, {"vocab", vocab}}}};
  };
  auto ok = Tokenizer::FromJson(unigram(kMaxPieceBytes).dump());
  ASSERT_TRUE(ok.ok()) << ok.status().message();
  auto ids = (*ok)->Encode(std::string(kMaxPieceBytes, 'a'), false);
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(*ids, std::vector<int32_t>{2});
  auto t = Tokenizer::FromJson(unigram(kMaxPieceBytes + 1).dump());
  ASSERT_FALSE(t.ok());
  EXPECT_TRUE(Contains(t.status().message(), "vocab[2] is a piece of 257 bytes")) << t.status().message();
}

// The BPE word cache is bounded by bytes as well as words: 131,072 words of 255 bytes, each
// merged into 255 ids, held ~180 MB. Past the bound part of the cache is evicted, not all of it,
// and what stays answers as a fresh merge would.
TEST(TokenizerHardening, BpeWordCacheStaysUnderItsByteBound) {
  json vocab = json::object();
  for (int c = 0; c < 26; ++c) vocab[std::string(1, static_cast<char>('a' + c))] = c;
  auto model = BpeModel::FromJson({{"type", "BPE"}, {"vocab", vocab}, {"merges", json::array()}});
  ASSERT_TRUE(model.ok()) << model.status().message();
  const BpeModel& bpe = **model;
  // Unique 255-byte words (no merges: 255 ids each), a few times what the bound holds.
  auto word = [](size_t i) {
    std::string w(255, 'a');
    for (size_t k = 0; k < 8; ++k, i /= 26) w[k] = static_cast<char>('a' + i % 26);
    return w;
  };
  const size_t per_word = 255 + 255 * sizeof(int32_t) + kBpeCacheEntryBytes;
  const size_t words = 3 * kBpeCacheMaxBytes / per_word;
  size_t most = 0;
  for (size_t i = 0; i < words; ++i) {
    std::vector<int32_t> ids;
    ASSERT_TRUE(bpe.Tokenize(word(i), &ids).ok());
    ASSERT_EQ(ids.size(), 255u);
    ASSERT_LE(bpe.cache_bytes(), kBpeCacheMaxBytes) << "after word " << i;
    ASSERT_LE(bpe.cache_words(), kBpeCacheMaxWords);
    most = std::max(most, bpe.cache_words());
  }
  EXPECT_EQ(bpe.cache_bytes(), bpe.cache_words() * per_word);
  EXPECT_GE(most, kBpeCacheMaxBytes / per_word - 1);  // it filled up to the bound
  EXPECT_GE(bpe.cache_words(), most / 2);             // and kept most of it
  // Cached or not, a word gives the same ids.
  for (size_t i : {size_t{0}, words / 2, words - 1}) {
    std::vector<int32_t> first, again;
    ASSERT_TRUE(bpe.Tokenize(word(i), &first).ok());
    ASSERT_TRUE(bpe.Tokenize(word(i), &again).ok());
    EXPECT_EQ(first, again);
    EXPECT_EQ(first[0], word(i)[0] - 'a');
  }
}

}  // namespace
}  // namespace loom::tokenizer
