// Hostile slow-tokenizer files: corrupt tokenizer.model (truncated protobuf, lengths past the
// end, huge counts, bad UTF-8, random damage), vocab.json and merges.txt: clear errors naming
// the file, never a crash.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>

#include "tokenizer/precompiled.h"
#include "tokenizer/sentencepiece_model.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"
#include "unit/tokenizer_test_util.h"

namespace loom::tokenizer {
namespace {

namespace fs = std::filesystem;
using test::ReadAll;

const fs::path kSlow = fs::path(LOOM_FIXTURES) / "tokenizers" / "slow";

bool Contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

// A scratch model folder under the test's temp dir.
class ModelDir {
 public:
  explicit ModelDir(const std::string& name)
      : path_(fs::path(testing::TempDir()) / ("loom_tok_forms_" + name)) {
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

// Protobuf encoding helpers.
std::string Varint(uint64_t v) {
  std::string out;
  while (v >= 0x80) {
    out += static_cast<char>((v & 0x7F) | 0x80);
    v >>= 7;
  }
  out += static_cast<char>(v);
  return out;
}
std::string Tag(uint32_t field, uint32_t wire) { return Varint((uint64_t{field} << 3) | wire); }
std::string Len(uint32_t field, const std::string& bytes) {
  return Tag(field, 2) + Varint(bytes.size()) + bytes;
}
std::string Piece(const std::string& piece, int type = 1) {
  return Len(1, Len(1, piece) + Tag(2, 5) + std::string("\0\0\0\0", 4) + Tag(3, 0) +
                    Varint(static_cast<uint64_t>(type)));
}

TEST(SentencePieceModel, ReadsTheRealFile) {
  const std::string bytes = ReadAll(kSlow / "TinyLlama-1.1B-Chat-v1.0" / "tokenizer.model");
  auto m = ParseSentencePieceModel(bytes, "tokenizer.model");
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_EQ(m->pieces.size(), 32000u);
  EXPECT_EQ(m->model_type, 2);  // BPE
  EXPECT_TRUE(m->byte_fallback);
  EXPECT_EQ(m->pieces[1].piece, "<s>");
  EXPECT_EQ(m->pieces[1].type, kSpControl);
  EXPECT_EQ(m->pieces[3].piece, "<0x00>");
  EXPECT_EQ(m->pieces[3].type, kSpByte);
}

TEST(SentencePieceModel, CorruptBuffersAreErrors) {
  const std::pair<std::string, const char*> cases[] = {
      {"", "no pieces"},
      {Tag(1, 2) + Varint(1000) + "abc", "past the end"},
      {std::string(11, '\xFF'), "varint"},
      {Tag(1, 2), "varint past the end"},
      {Tag(1, 3) + "x", "wire type 3"},
      {Tag(1, 0) + Varint(5), "pieces"},  // a varint where a message belongs
      {Piece("\xFF\xFE"), "UTF-8"},
      {Piece("a", 9), "piece type 9"},
      {Piece("a") + Piece("b") + Piece("c", 9), "tokenizer.model pieces[2]: piece type 9"},
      {Tag(1, 5) + "ab", "past the end"},
      {Len(2, Tag(3, 2) + Varint(1) + "x"), "model_type"},
      {Varint(0) + "x", "field number"},
  };
  for (const auto& [bytes, message] : cases) {
    auto m = ParseSentencePieceModel(bytes, "dir/tokenizer.model");
    ASSERT_FALSE(m.ok()) << message;
    EXPECT_TRUE(Contains(m.status().message(), message)) << m.status().message();
    EXPECT_TRUE(Contains(m.status().message(), "dir/tokenizer.model")) << m.status().message();
  }
}

TEST(SentencePieceModel, HugePieceCountIsRefused) {
  std::string bytes;
  const std::string empty_piece = Len(1, "");
  bytes.reserve((kMaxSpPieces + 1) * empty_piece.size());
  for (size_t i = 0; i <= kMaxSpPieces; ++i) bytes += empty_piece;
  auto m = ParseSentencePieceModel(bytes, "tokenizer.model");
  ASSERT_FALSE(m.ok());
  EXPECT_TRUE(Contains(m.status().message(), "more than")) << m.status().message();
}

// Every prefix length of a small real model and random byte damage: an error or a tokenizer,
// never a crash (what the tokenizer_model fuzz target explores further).
TEST(SentencePieceModel, TruncationAndDamageNeverCrash) {
  const std::string bytes = ReadAll(kSlow / "spm-unigram" / "tokenizer.model");
  ASSERT_GT(bytes.size(), 1000u);
  ModelDir dir("damage");
  dir.Write("tokenizer_config.json", "{\"tokenizer_class\": \"TokenizersBackend\"}");
  for (size_t cut = 0; cut < bytes.size(); cut += 97) {
    dir.Write("tokenizer.model", bytes.substr(0, cut));
    auto t = Tokenizer::FromModelDir(dir.path());
    if (t.ok()) (void)(*t)->Encode("Hello world", true);
  }
  std::mt19937 rng(7);
  for (int round = 0; round < 200; ++round) {
    std::string damaged = bytes;
    for (int k = 0; k < 4; ++k) damaged[rng() % damaged.size()] = static_cast<char>(rng());
    dir.Write("tokenizer.model", damaged);
    auto t = Tokenizer::FromModelDir(dir.path());
    if (t.ok()) (void)(*t)->Encode("Hello world ünï 😀", true);
  }
}

TEST(SlowFolders, MissingFilesAreNamed) {
  ModelDir dir("missing");
  auto t = Tokenizer::FromModelDir(dir.path());
  ASSERT_FALSE(t.ok());
  EXPECT_TRUE(Contains(t.status().message(), "tokenizer.model, or vocab.json + merges.txt"))
      << t.status().message();
  dir.Write("tokenizer_config.json", "{\"tokenizer_class\": \"Qwen2Tokenizer\"}");
  dir.Write("vocab.json", "{\"a\": 0}");
  t = Tokenizer::FromModelDir(dir.path());
  ASSERT_FALSE(t.ok());
  EXPECT_TRUE(Contains(t.status().message(), "no merges.txt")) << t.status().message();
  EXPECT_TRUE(Contains(t.status().message(), "Qwen2Tokenizer")) << t.status().message();
  auto none = HasTokenizerFiles(dir.path() + "/none");
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(*none);
  auto some = HasTokenizerFiles(dir.path());
  ASSERT_TRUE(some.ok());
  EXPECT_TRUE(*some);
}

TEST(SlowFolders, CorruptVocabAndMergesAreErrors) {
  const std::string config = "{\"tokenizer_class\": \"GPT2Tokenizer\"}";
  const std::string vocab = "{\"a\": 0, \"b\": 1, \"ab\": 2}";
  const struct {
    std::string vocab, merges, message;
  } cases[] = {
      {"[1, 2]", "a b\n", "vocab.json: expected an object"},
      {"{\"a\": ", "a b\n", "vocab.json"},
      {"{\"a\": -1}", "", "invalid id"},
      {"{\"a\": 99999999999}", "", "invalid id"},
      {"{\"a\": 0, \"b\": 16000000}", "", "too large"},
      {vocab, "a b c\n", "merges.txt: line 1"},
      {vocab, "#version: 0.2\na b\n\n", "merges.txt: line 3"},
      {vocab, "a\n", "merges.txt: line 1"},
      {vocab, "a z\n", "'z' is not in the vocab"},
      {vocab, "b a\n", "result 'ba' is not in the vocab"},
      {vocab, "a \xFF\n", "UTF-8"},
  };
  for (const auto& c : cases) {
    ModelDir dir("corrupt");
    dir.Write("tokenizer_config.json", config);
    dir.Write("vocab.json", c.vocab);
    dir.Write("merges.txt", c.merges);
    auto t = Tokenizer::FromModelDir(dir.path());
    ASSERT_FALSE(t.ok()) << c.message;
    EXPECT_TRUE(Contains(t.status().message(), c.message)) << t.status().message();
  }
  // The same files load when sound; "#version" and CRLF lines are read as the library does.
  ModelDir dir("sound");
  dir.Write("tokenizer_config.json", config);
  dir.Write("vocab.json", vocab);
  dir.Write("merges.txt", "#version: 0.2\r\na b\r\n");
  auto t = Tokenizer::FromModelDir(dir.path());
  ASSERT_TRUE(t.ok()) << t.status().message();
  EXPECT_EQ(*(*t)->Encode("ab", false), (std::vector<int32_t>{2}));
}

TEST(SlowFolders, UnsupportedFormsAreNamed) {
  const std::string model = ReadAll(kSlow / "spm-unigram" / "tokenizer.model");
  {
    ModelDir dir("xlnet");
    dir.Write("tokenizer_config.json", "{\"tokenizer_class\": \"XLNetTokenizer\"}");
    dir.Write("tokenizer.model", model);
    auto t = Tokenizer::FromModelDir(dir.path());
    ASSERT_FALSE(t.ok());
    EXPECT_TRUE(Contains(t.status().message(), "'XLNetTokenizer'")) << t.status().message();
  }
  {
    ModelDir dir("bert");
    dir.Write("tokenizer_config.json", "{\"tokenizer_class\": \"BertTokenizer\"}");
    dir.Write("vocab.json", "{}");
    dir.Write("merges.txt", "");
    auto t = Tokenizer::FromModelDir(dir.path());
    ASSERT_FALSE(t.ok());
    EXPECT_TRUE(Contains(t.status().message(), "'BertTokenizer'")) << t.status().message();
  }
  {
    // A precompiled normalization charsmap too short for its trie size is named.
    ModelDir dir("charsmap");
    dir.Write("tokenizer.model",
              Piece("<unk>", 2) + Piece("a") + Len(3, Len(1, "nmt_nfkc") + Len(2, "xyz")));
    auto t = Tokenizer::FromModelDir(dir.path());
    ASSERT_FALSE(t.ok());
    EXPECT_TRUE(Contains(t.status().message(), "precompiled_charsmap")) << t.status().message();
  }
  {
    // A unigram model whose unk_id is not a piece.
    ModelDir dir("unk");
    dir.Write("tokenizer.model", Piece("<unk>", 2) + Piece("a") + Len(2, Tag(40, 0) + Varint(7)));
    auto t = Tokenizer::FromModelDir(dir.path());
    ASSERT_FALSE(t.ok());
    EXPECT_TRUE(Contains(t.status().message(), "unk_id 7")) << t.status().message();
  }
}

// Precompiled charsmaps: sizes past the end, bad UTF-8 and bad base64 are errors; random tries
// (offsets anywhere) and outputs never read out of bounds.
TEST(Precompiled, CorruptCharsmaps) {
  const std::pair<std::string, const char*> cases[] = {
      {"", "at least 4"},
      {std::string("\x10\0\0\0abc", 7), "past the end"},
      {std::string("\0\0\0\0\xFF", 5), "UTF-8"},
  };
  for (const auto& [bytes, message] : cases) {
    auto m = PrecompiledCharsmap::Parse(bytes, "tokenizer.model");
    ASSERT_FALSE(m.ok()) << message;
    EXPECT_TRUE(Contains(m.status().message(), message)) << m.status().message();
  }
  EXPECT_FALSE(DecodeBase64("ab$c", "x").ok());
  EXPECT_FALSE(DecodeBase64("a", "x").ok());
  EXPECT_EQ(*DecodeBase64("aGk=", "x"), "hi");
  std::mt19937 rng(3);
  for (int round = 0; round < 300; ++round) {
    const uint32_t units = rng() % 64;
    std::string bytes(4, '\0');
    for (int i = 0; i < 4; ++i) bytes[i] = static_cast<char>(((units * 4) >> (8 * i)) & 0xFF);
    for (uint32_t i = 0; i < units * 4; ++i) bytes += static_cast<char>(rng());
    bytes += std::string("a\0bc\0\xC3\xA9\0", 8);
    auto m = PrecompiledCharsmap::Parse(bytes, "random");
    ASSERT_TRUE(m.ok()) << m.status().message();
    auto out = m->Apply("Hello w\xC3\xB6rld \xF0\x9F\x98\x80 e\xCC\x81", 1 << 20);
    ASSERT_TRUE(out.ok());
    EXPECT_TRUE(IsValidUtf8(*out));
  }
}

}  // namespace
}  // namespace loom::tokenizer
