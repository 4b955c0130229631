// Tests of the safetensors reader and writer: round trips, every reject path, shards, real files.
#include "io/safetensors.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "tensor/dtype.h"

namespace loom {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

const std::string kModels = std::string(LOOM_FIXTURES) + "/models";
const std::string kShared = std::string(LOOM_FIXTURES) + "/shared";

// Whether `text` (an error message) contains `part`; on failure prints both.
::testing::AssertionResult Contains(const std::string& text, const std::string& part) {
  if (text.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "'" << part << "' not in: " << text;
}

// A fresh folder under the system temp dir, removed at the end of the test.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "loom_safetensors_XXXXXX").string();
    char* p = mkdtemp(tmpl.data());
    EXPECT_NE(p, nullptr) << "mkdtemp failed for " << tmpl;
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string File(const std::string& name) const { return (fs::path(path_) / name).string(); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << "cannot write " << path;
}

std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// A safetensors image: 8-byte little-endian header length, header text, data bytes.
std::string Image(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  uint64_t len = header.size();
  for (int i = 0; i < 8; ++i)
    out[static_cast<size_t>(i)] = static_cast<char>((len >> (8 * i)) & 0xff);
  return out + header + data;
}

// Non-zero pseudo-random bytes (a data section whose content must not matter to the checks).
std::string RandomData(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (auto& c : s) c = static_cast<char>(1 + rng() % 255);
  return s;
}

StatusOr<std::vector<TensorInfo>> Parse(const std::string& image, const std::string& path,
                                        std::map<std::string, std::string>* metadata = nullptr) {
  return ParseSafetensors(reinterpret_cast<const uint8_t*>(image.data()), image.size(), path,
                          metadata);
}

// Parses `header` + 64 random data bytes and expects an error that names the file and has
// every string of `needles`.
void ExpectHeaderRejected(const std::string& header, const std::vector<std::string>& needles,
                          size_t data_bytes = 64) {
  const std::string path = "ckpt/bad.safetensors";
  auto r = Parse(Image(header, RandomData(data_bytes, 7)), path);
  ASSERT_FALSE(r.ok()) << "header accepted: " << header;
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(r.status().message(), path));
  for (const auto& n : needles) EXPECT_TRUE(Contains(r.status().message(), n)) << header;
}

std::vector<float> RandomFloats(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
  std::vector<float> v(n);
  for (auto& x : v) {
    do {
      x = dist(rng);
    } while (std::fabs(x) < 1e-3f);  // never zero
  }
  return v;
}

// ---------------------------------------------------------------------------------------
// Round trip.

TEST(SafetensorsTest, RoundTripF32F16Bf16KeepsBytesShapesOrderAndMetadata) {
  TempDir dir;
  std::vector<float> f32 = RandomFloats(3 * 5, 1);
  std::vector<float> src16 = RandomFloats(4 * 2 * 3, 2);
  std::vector<uint16_t> f16(src16.size());
  std::vector<uint16_t> bf16(src16.size());
  for (size_t i = 0; i < src16.size(); ++i) {
    f16[i] = F32ToF16(src16[i]);
    bf16[i] = F32ToBf16(src16[i] * 3.0f);
  }
  float scalar = RandomFloats(1, 3)[0];
  std::vector<TensorToWrite> tensors = {
      {"model.z_first.weight", DType::kF32, {3, 5}, f32.data()},
      {"a.half", DType::kF16, {4, 2, 3}, f16.data()},
      {"m.bf16", DType::kBF16, {24}, bf16.data()},
      {"scalar", DType::kF32, {}, &scalar},
  };
  const std::map<std::string, std::string> meta = {{"format", "pt"}, {"made_by", "loom test"}};
  const std::string path = dir.File("rt.safetensors");
  ASSERT_TRUE(WriteSafetensors(path, tensors, meta).ok());
  EXPECT_FALSE(fs::exists(path + ".tmp"));

  // Header is padded to a multiple of 8 bytes, as the format recommends.
  std::string raw = ReadBytes(path);
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i)
    header_len = (header_len << 8) | static_cast<uint8_t>(raw[static_cast<size_t>(i)]);
  EXPECT_EQ(header_len % 8, 0u);

  auto store = SafetensorsStore::Open(path);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  const SafetensorsStore& s = **store;
  // The header is a JSON object (names come back sorted); the data keeps the given order.
  EXPECT_EQ(std::set<std::string>(s.names().begin(), s.names().end()),
            (std::set<std::string>{"model.z_first.weight", "a.half", "m.bf16", "scalar"}));
  ASSERT_EQ(s.names().size(), 4u);
  for (size_t i = 1; i < tensors.size(); ++i) {
    EXPECT_LT(s.Find(tensors[i - 1].name)->data, s.Find(tensors[i].name)->data) << i;
  }
  EXPECT_EQ(s.metadata(), meta);
  EXPECT_EQ(s.files(), std::vector<std::string>{path});
  EXPECT_EQ(s.total_bytes(), 15u * 4 + 24u * 2 + 24u * 2 + 4u);

  struct Want {
    std::string name;
    DType dtype;
    std::string dtype_name;
    std::vector<int64_t> shape;
    const void* data;
    size_t nbytes;
  };
  for (const Want& w :
       std::vector<Want>{{"model.z_first.weight", DType::kF32, "F32", {3, 5}, f32.data(), 60},
                         {"a.half", DType::kF16, "F16", {4, 2, 3}, f16.data(), 48},
                         {"m.bf16", DType::kBF16, "BF16", {24}, bf16.data(), 48},
                         {"scalar", DType::kF32, "F32", {}, &scalar, 4}}) {
    SCOPED_TRACE(w.name);
    const TensorInfo* info = s.Find(w.name);
    ASSERT_NE(info, nullptr);
    EXPECT_EQ(info->dtype_name, w.dtype_name);
    ASSERT_TRUE(info->dtype.has_value());
    EXPECT_EQ(*info->dtype, w.dtype);
    EXPECT_EQ(info->shape, w.shape);
    EXPECT_EQ(info->file, path);
    ASSERT_EQ(info->nbytes, w.nbytes);
    EXPECT_EQ(std::memcmp(info->data, w.data, w.nbytes), 0);
    auto t = s.Get(w.name);
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    EXPECT_EQ(t->dtype, w.dtype);
    EXPECT_EQ(t->shape, w.shape);
    EXPECT_EQ(t->nbytes(), w.nbytes);
    EXPECT_EQ(std::memcmp(t->data, w.data, w.nbytes), 0);
  }
  // The values read back convert to what was written.
  auto half = s.Get("a.half");
  ASSERT_TRUE(half.ok());
  std::vector<float> back(src16.size());
  ConvertToF32(DType::kF16, half->data, back.data(), static_cast<int64_t>(back.size()));
  for (size_t i = 0; i < back.size(); ++i) EXPECT_NEAR(back[i], src16[i], 2e-3f) << i;
}

TEST(SafetensorsTest, WriteWithoutMetadataAndEmptyFileOfTensors) {
  TempDir dir;
  const std::string path = dir.File("none.safetensors");
  ASSERT_TRUE(WriteSafetensors(path, {}).ok());
  auto store = SafetensorsStore::Open(path);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  EXPECT_TRUE((*store)->names().empty());
  EXPECT_TRUE((*store)->metadata().empty());
}

TEST(SafetensorsTest, GetErrorsNameTheTensorAndFile) {
  TempDir dir;
  std::vector<float> v = RandomFloats(4, 9);
  const std::string path = dir.File("g.safetensors");
  ASSERT_TRUE(WriteSafetensors(path, {{"present", DType::kF32, {4}, v.data()}}).ok());
  auto store = SafetensorsStore::Open(path);
  ASSERT_TRUE(store.ok());
  EXPECT_EQ((*store)->Find("absent.weight"), nullptr);
  auto t = (*store)->Get("absent.weight");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(Contains(t.status().message(), "absent.weight"));
  EXPECT_TRUE(Contains(t.status().message(), path));
}

// ---------------------------------------------------------------------------------------
// Reject paths of the parser.

TEST(SafetensorsRejectTest, EmptyFile) {
  auto r = ParseSafetensors(nullptr, 0, "dir/empty.safetensors", nullptr);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(Contains(r.status().message(), "dir/empty.safetensors"));
  EXPECT_TRUE(Contains(r.status().message(), "empty file"));

  TempDir dir;
  const std::string path = dir.File("zero.safetensors");
  WriteBytes(path, "");
  auto s = SafetensorsStore::Open(path);
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(Contains(s.status().message(), path));
  EXPECT_TRUE(Contains(s.status().message(), "empty file"));
}

TEST(SafetensorsRejectTest, ShorterThanEightBytes) {
  for (size_t n = 1; n < 8; ++n) {
    std::string bytes = RandomData(n, static_cast<uint32_t>(n));
    auto r = Parse(bytes, "short.safetensors");
    ASSERT_FALSE(r.ok()) << n;
    EXPECT_TRUE(Contains(r.status().message(), "short.safetensors"));
    EXPECT_TRUE(Contains(r.status().message(), std::to_string(n) + " bytes"));
    EXPECT_TRUE(Contains(r.status().message(), "too short"));
  }
}

TEST(SafetensorsRejectTest, HeaderLengthLargerThanFile) {
  std::string image = Image("{}", "");
  image[0] = static_cast<char>(0xe8);  // claims a 1000-byte header in a 10-byte file
  image[1] = static_cast<char>(0x03);
  auto r = Parse(image, "trunc.safetensors");
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(Contains(r.status().message(), "trunc.safetensors"));
  EXPECT_TRUE(Contains(r.status().message(), "header length 1000 exceeds the file size 10"));

  // A huge length must not wrap around when added to 8.
  std::string huge(16, static_cast<char>(0xff));
  auto h = Parse(huge, "huge.safetensors");
  ASSERT_FALSE(h.ok());
  EXPECT_TRUE(Contains(h.status().message(), "huge.safetensors: not a safetensors file"));

  // Some other file (a link out of the folder, say) whose first bytes are text: its bytes are not
  // printed back as a number ("secretXX" read as a length was 6365966052347831667).
  auto text = Parse("secretXX and more", "link.safetensors");
  ASSERT_FALSE(text.ok());
  EXPECT_EQ(text.status().message(),
            "link.safetensors: not a safetensors file (its first 8 bytes are no header length)");
}

TEST(SafetensorsRejectTest, GitLfsPointerText) {
  const std::string pointer =
      "version https://git-lfs.github.com/spec/v1\n"
      "oid sha256:4d7a214614ab2935c943f9e0ff69d22eadbb8f32b1258daaa5e2ca24d17e2393\n"
      "size 12345\n";
  auto r = Parse(pointer, "lfs/model.safetensors");
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(Contains(r.status().message(), "lfs/model.safetensors"));
  EXPECT_TRUE(Contains(r.status().message(), "git-LFS pointer"));
}

TEST(SafetensorsRejectTest, HeaderNotJson) {
  ExpectHeaderRejected("{\"a\": {\"dtype\": \"F32\",", {"not valid JSON"});
  ExpectHeaderRejected("garbage!", {"not valid JSON"});
}

TEST(SafetensorsRejectTest, HeaderNotAnObject) {
  ExpectHeaderRejected("[1, 2, 3]", {"not a JSON object"});
  ExpectHeaderRejected("\"text\"", {"not a JSON object"});
}

// A shape of 50M dimensions was a 2.3 GB DOM (and an abort freeing it under a memory limit);
// a megabyte tensor name made inspect quadratic. Both refused from the header text.
TEST(SafetensorsRejectTest, ShapeRankAndNameLengthAreBounded) {
  std::string dims = "1";
  for (int i = 0; i < 100000; ++i) dims += ",1";
  ExpectHeaderRejected(R"({"w": {"dtype": "U8", "shape": [)" + dims + R"(], "data_offsets": [0, 1]}})",
                       {"more than 16 elements"});
  ExpectHeaderRejected(R"({"w": {"dtype": "U8", "shape": [1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1], "data_offsets": [0, 1]}})",
                       {"more than 16 elements"});
  const std::string long_name(5000, 'a');
  ExpectHeaderRejected(R"({")" + long_name + R"(": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]}})",
                       {"5000 bytes, above the limit of 4096"});
}

TEST(SafetensorsRejectTest, EntryMissingDtypeShapeOrOffsets) {
  ExpectHeaderRejected(R"({"w.no_dtype": {"shape": [4], "data_offsets": [0, 16]}})",
                       {"'w.no_dtype'", "missing dtype"});
  ExpectHeaderRejected(R"({"w.no_shape": {"dtype": "F32", "data_offsets": [0, 16]}})",
                       {"'w.no_shape'", "missing shape"});
  ExpectHeaderRejected(R"({"w.no_offsets": {"dtype": "F32", "shape": [4]}})",
                       {"'w.no_offsets'", "data_offsets must be [begin, end]"});
  ExpectHeaderRejected(R"({"w.three": {"dtype": "F32", "shape": [4], "data_offsets": [0, 8, 16]}})",
                       {"'w.three'", "data_offsets must be [begin, end]"});
  ExpectHeaderRejected(R"({"w.not_object": [1, 2]})", {"'w.not_object'", "not an object"});
  ExpectHeaderRejected(R"({"w.dtype_num": {"dtype": 7, "shape": [4], "data_offsets": [0, 16]}})",
                       {"'w.dtype_num'", "missing dtype"});
}

TEST(SafetensorsRejectTest, UnknownDtype) {
  ExpectHeaderRejected(R"({"w.q4": {"dtype": "Q4_K", "shape": [4], "data_offsets": [0, 16]}})",
                       {"'w.q4'", "unknown dtype 'Q4_K'"});
  // Names are case-sensitive in the format.
  ExpectHeaderRejected(R"({"w.lower": {"dtype": "f32", "shape": [4], "data_offsets": [0, 16]}})",
                       {"'w.lower'", "unknown dtype 'f32'"});
}

TEST(SafetensorsRejectTest, NegativeOrNonIntegerShape) {
  ExpectHeaderRejected(R"({"w.neg": {"dtype": "F32", "shape": [-1, 4], "data_offsets": [0, 16]}})",
                       {"'w.neg'", "shape entries must be non-negative integers"});
  ExpectHeaderRejected(R"({"w.frac": {"dtype": "F32", "shape": [2.5], "data_offsets": [0, 10]}})",
                       {"'w.frac'", "shape entries must be non-negative integers"});
  ExpectHeaderRejected(R"({"w.str": {"dtype": "F32", "shape": ["4"], "data_offsets": [0, 16]}})",
                       {"'w.str'", "shape entries must be non-negative integers"});
  ExpectHeaderRejected(
      R"({"w.big": {"dtype": "F32", "shape": [4611686018427387904, 4611686018427387904],)"
      R"( "data_offsets": [0, 16]}})",
      {"'w.big'", "shape is too large"});
  // A zero dimension must not let a dimension beyond int64 through.
  ExpectHeaderRejected(R"({"w.zero_big": {"dtype": "F32", "shape": [0, 18446744073709551615],)"
                       R"( "data_offsets": [0, 0]}})",
                       {"'w.zero_big'", "shape is too large"});
}

TEST(SafetensorsRejectTest, DataOffsetsOutOfRange) {
  ExpectHeaderRejected(R"({"w.far": {"dtype": "F32", "shape": [4], "data_offsets": [60, 76]}})",
                       {"'w.far'", "data_offsets [60, 76] out of range", "64 bytes"});
  ExpectHeaderRejected(R"({"w.neg_off": {"dtype": "F32", "shape": [4], "data_offsets": [-16, 0]}})",
                       {"'w.neg_off'", "data_offsets must be non-negative integers"});
  ExpectHeaderRejected(
      R"({"w.float_off": {"dtype": "F32", "shape": [1], "data_offsets": [0.0, 4.0]}})",
      {"'w.float_off'", "data_offsets must be non-negative integers"});
}

TEST(SafetensorsRejectTest, BeginAfterEnd) {
  ExpectHeaderRejected(
      R"({"w.backwards": {"dtype": "F32", "shape": [2], "data_offsets": [24, 16]}})",
      {"'w.backwards'", "[24, 16]"});
}

TEST(SafetensorsRejectTest, ShapeTimesDtypeDiffersFromSpan) {
  ExpectHeaderRejected(R"({"w.span": {"dtype": "BF16", "shape": [3, 4], "data_offsets": [0, 16]}})",
                       {"'w.span'", "shape [3, 4]", "BF16", "needs 24 bytes", "span 16"});
}

TEST(SafetensorsRejectTest, OverlappingTensors) {
  ExpectHeaderRejected(R"({"w.a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
                           "w.b": {"dtype": "F32", "shape": [4], "data_offsets": [8, 24]}})",
                       {"'w.a'", "'w.b'", "overlap"});
  // Same range twice.
  ExpectHeaderRejected(R"({"w.c": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
                           "w.d": {"dtype": "F16", "shape": [8], "data_offsets": [0, 16]}})",
                       {"'w.c'", "'w.d'", "overlap"});
  // One tensor inside another, with an empty tensor sorted between them: the empty one inside
  // the outer range is the first offender (the reference library rejects it too).
  ExpectHeaderRejected(R"({"w.outer": {"dtype": "F32", "shape": [8], "data_offsets": [0, 32]},
                           "w.empty": {"dtype": "F32", "shape": [0], "data_offsets": [4, 4]},
                           "w.inner": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]}})",
                       {"'w.outer'", "'w.empty'", "overlap"});
  ExpectHeaderRejected(R"({"w.outer": {"dtype": "F32", "shape": [8], "data_offsets": [0, 32]},
                           "w.inner": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]}})",
                       {"'w.outer'", "'w.inner'", "overlap"});
}

// The tensors tile the data section, as the reference library's validate() requires: a gap
// before a tensor, or bytes after the last, loaded without a word (transformers and vLLM refuse
// such a file, and the bytes could carry anything).
TEST(SafetensorsRejectTest, GapsAndTrailingBytes) {
  ExpectHeaderRejected(R"({"w.a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
                           "w.b": {"dtype": "F32", "shape": [4], "data_offsets": [20, 36]}})",
                       {"4 unused bytes before tensor 'w.b'", "at offset 16"}, 36);
  ExpectHeaderRejected(R"({"w.a": {"dtype": "F32", "shape": [4], "data_offsets": [8, 24]}})",
                       {"8 unused bytes before tensor 'w.a'", "at offset 0"}, 24);
  ExpectHeaderRejected(R"({"w.a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}})",
                       {"48 bytes after the last tensor", "64 bytes"}, 64);
  ExpectHeaderRejected(R"({})", {"1 bytes after the last tensor"}, 1);
  auto exact = Parse(Image(R"({"w.a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}})",
                           RandomData(16, 7)),
                     "ok.safetensors");
  EXPECT_TRUE(exact.ok()) << exact.status().ToString();
}

TEST(SafetensorsRejectTest, AdjacentAndEmptyTensorsAreNotOverlaps) {
  const std::string header = R"({"w.a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
                                 "w.e": {"dtype": "F32", "shape": [0, 3], "data_offsets": [16, 16]},
                                 "w.b": {"dtype": "U8", "shape": [16], "data_offsets": [16, 32]}})";
  auto r = Parse(Image(header, RandomData(32, 3)), "ok.safetensors");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->size(), 3u);
  for (const TensorInfo& info : *r) {
    if (info.name != "w.b") continue;
    EXPECT_EQ(info.dtype_name, "U8");
    EXPECT_FALSE(info.dtype.has_value());
    EXPECT_EQ(info.nbytes, 16u);
  }
}

TEST(SafetensorsRejectTest, MetadataMustBeStringValued) {
  ExpectHeaderRejected(R"({"__metadata__": {"format": "pt", "step": 100}})",
                       {"__metadata__ value 'step' is not a string"});
  ExpectHeaderRejected(R"({"__metadata__": ["format", "pt"]})", {"__metadata__ is not an object"});
}

// ---------------------------------------------------------------------------------------
// Sharded checkpoints.

// The shard each tensor of the fixture's index lives in.
std::map<std::string, std::string> IndexWeightMap(const std::string& index_path) {
  json j = json::parse(ReadBytes(index_path));
  std::map<std::string, std::string> out;
  for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
    out[it.key()] = it.value().get<std::string>();
  }
  return out;
}

void ExpectMistralShards(const SafetensorsStore& s, const std::string& dir) {
  const auto weight_map = IndexWeightMap(dir + "/model.safetensors.index.json");
  ASSERT_GT(weight_map.size(), 20u);
  EXPECT_EQ(s.files().size(), 2u);
  EXPECT_EQ(s.names().size(), weight_map.size());
  std::set<std::string> shards_seen;
  for (const auto& [name, shard] : weight_map) {
    SCOPED_TRACE(name);
    const TensorInfo* info = s.Find(name);
    ASSERT_NE(info, nullptr);
    EXPECT_EQ(fs::path(info->file).filename().string(), shard);
    shards_seen.insert(shard);
    auto t = s.Get(name);
    ASSERT_TRUE(t.ok()) << t.status().ToString();
  }
  EXPECT_EQ(shards_seen, (std::set<std::string>{"model-00001-of-00002.safetensors",
                                                "model-00002-of-00002.safetensors"}));
  EXPECT_EQ(s.metadata().at("format"), "pt");
}

TEST(SafetensorsShardTest, MistralOpensViaFolderAndViaIndex) {
  for (const char* name : {"mistral_f32", "mistral_bf16"}) {
    SCOPED_TRACE(name);
    const std::string dir = kModels + "/" + name;
    auto by_dir = SafetensorsStore::Open(dir);
    ASSERT_TRUE(by_dir.ok()) << by_dir.status().ToString();
    ExpectMistralShards(**by_dir, dir);
    auto by_index = SafetensorsStore::Open(dir + "/model.safetensors.index.json");
    ASSERT_TRUE(by_index.ok()) << by_index.status().ToString();
    ExpectMistralShards(**by_index, dir);
    EXPECT_EQ((*by_dir)->total_bytes(), (*by_index)->total_bytes());
  }
}

// Writes a shard holding the named tensors (random f32 [2, 3] each).
void WriteShard(const std::string& path, const std::vector<std::string>& names, uint32_t seed) {
  std::vector<std::vector<float>> values;
  for (size_t i = 0; i < names.size(); ++i) values.push_back(RandomFloats(6, seed + i));
  std::vector<TensorToWrite> tensors;
  for (size_t i = 0; i < names.size(); ++i) {
    tensors.push_back({names[i], DType::kF32, {2, 3}, values[i].data()});
  }
  ASSERT_TRUE(WriteSafetensors(path, tensors, {{"format", "pt"}}).ok()) << path;
}

void WriteIndex(const std::string& path, const json& weight_map) {
  WriteBytes(path, json{{"metadata", {{"total_size", 48}}}, {"weight_map", weight_map}}.dump());
}

TEST(SafetensorsShardTest, IndexMappingTensorToShardWithoutIt) {
  TempDir dir;
  WriteShard(dir.File("a.safetensors"), {"x.weight"}, 1);
  WriteShard(dir.File("b.safetensors"), {"y.weight"}, 2);
  WriteIndex(dir.File("model.safetensors.index.json"),
             {{"x.weight", "a.safetensors"}, {"y.weight", "a.safetensors"}});
  auto s = SafetensorsStore::Open(dir.path());
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(Contains(s.status().message(), "'y.weight'"));
  EXPECT_TRUE(Contains(s.status().message(), dir.File("a.safetensors")));
  EXPECT_TRUE(Contains(s.status().message(), "does not contain it"));
}

TEST(SafetensorsShardTest, ShardNameWithPathIsRejected) {
  TempDir dir;
  fs::create_directory(dir.File("sub"));
  WriteShard(dir.File("sub/a.safetensors"), {"x.weight"}, 1);
  for (const std::string shard :
       {"sub/a.safetensors", "../a.safetensors", "..", "/etc/passwd", "..a.safetensors"}) {
    SCOPED_TRACE(shard);
    const std::string index = dir.File("model.safetensors.index.json");
    WriteIndex(index, {{"x.weight", shard}});
    auto s = SafetensorsStore::Open(index);
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
    EXPECT_TRUE(Contains(s.status().message(), index));
    EXPECT_TRUE(Contains(s.status().message(), "'" + shard + "'"));
    EXPECT_TRUE(Contains(s.status().message(), "same folder"));
  }
}

TEST(SafetensorsShardTest, HeadersAndIndexesOfTooManyEntriesAreRefusedBeforeTheyAreBuilt) {
  // 1.7 M empty tensors in a 99 MB header built a 1.6 GB DOM; 200 K here pass the header's
  // 512 K arrays and objects (3 a tensor).
  std::string header = "{";
  for (int i = 0; i < 200000; ++i) {
    header += (i ? ",\"t" : "\"t") + std::to_string(i) +
              R"(":{"dtype":"U8","shape":[0],"data_offsets":[0,0]})";
  }
  header += "}";
  auto r = Parse(Image(header, ""), "many.safetensors");
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(
      Contains(r.status().message(), "many.safetensors: header: more than 524288 JSON arrays"))
      << r.status().message();
  // An index naming 600 K tensors (the largest real ones name ~150 K).
  TempDir dir;
  WriteShard(dir.File("a.safetensors"), {"x.weight"}, 1);
  json weight_map = json::object();
  for (int i = 0; i < 600000; ++i) weight_map["t" + std::to_string(i)] = "a.safetensors";
  const std::string index = dir.File("model.safetensors.index.json");
  WriteIndex(index, weight_map);
  auto s = SafetensorsStore::Open(index);
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(Contains(s.status().message(), index + ": more than 524288 JSON values"))
      << s.status().message();
}

TEST(SafetensorsShardTest, MissingShardFile) {
  TempDir dir;
  WriteShard(dir.File("model-00001-of-00002.safetensors"), {"x.weight"}, 1);
  WriteIndex(dir.File("model.safetensors.index.json"),
             {{"x.weight", "model-00001-of-00002.safetensors"},
              {"y.weight", "model-00002-of-00002.safetensors"}});
  auto s = SafetensorsStore::Open(dir.path());
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(Contains(s.status().message(), dir.File("model-00002-of-00002.safetensors")));
}

TEST(SafetensorsShardTest, TensorInTwoShards) {
  TempDir dir;
  WriteShard(dir.File("a.safetensors"), {"x.weight"}, 1);
  WriteShard(dir.File("b.safetensors"), {"x.weight", "y.weight"}, 3);
  WriteIndex(dir.File("model.safetensors.index.json"),
             {{"x.weight", "a.safetensors"}, {"y.weight", "b.safetensors"}});
  auto s = SafetensorsStore::Open(dir.path());
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(Contains(s.status().message(), "'x.weight'"));
  EXPECT_TRUE(Contains(s.status().message(), dir.File("a.safetensors")));
  EXPECT_TRUE(Contains(s.status().message(), dir.File("b.safetensors")));
}

TEST(SafetensorsShardTest, BrokenIndexFiles) {
  TempDir dir;
  const std::string index = dir.File("model.safetensors.index.json");
  struct Case {
    std::string text;
    std::string needle;
  };
  for (const Case& c : std::vector<Case>{{"{\"weight_map\": ", "not valid JSON"},
                                         {"[]", "not a valid JSON object"},
                                         {"{\"metadata\": {}}", "missing or empty 'weight_map'"},
                                         {"{\"weight_map\": {}}", "missing or empty 'weight_map'"},
                                         {"{\"weight_map\": {\"x.weight\": 3}}",
                                          "weight_map entry 'x.weight' is not a string"}}) {
    SCOPED_TRACE(c.text);
    WriteBytes(index, c.text);
    auto s = SafetensorsStore::Open(dir.path());
    ASSERT_FALSE(s.ok());
    EXPECT_TRUE(Contains(s.status().message(), index));
    EXPECT_TRUE(Contains(s.status().message(), c.needle));
  }
}

TEST(SafetensorsShardTest, FolderWithoutCheckpointAndOtherStem) {
  TempDir dir;
  auto none = SafetensorsStore::Open(dir.path());
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(Contains(none.status().message(), dir.path()));
  EXPECT_TRUE(Contains(none.status().message(), "model.safetensors"));

  WriteShard(dir.File("adapter_model.safetensors"), {"lora_A.weight"}, 4);
  auto adapter = SafetensorsStore::Open(dir.path(), "adapter_model");
  ASSERT_TRUE(adapter.ok()) << adapter.status().ToString();
  EXPECT_NE((*adapter)->Find("lora_A.weight"), nullptr);

  // Both a single file and an index: transformers and vLLM would read different ones.
  WriteShard(dir.File("model.safetensors"), {"a.weight"}, 4);
  WriteShard(dir.File("model-00001-of-00001.safetensors"), {"a.weight"}, 4);
  WriteIndex(dir.File("model.safetensors.index.json"),
             {{"a.weight", "model-00001-of-00001.safetensors"}});
  auto both = SafetensorsStore::Open(dir.path());
  ASSERT_FALSE(both.ok());
  EXPECT_TRUE(Contains(both.status().message(),
                       "both model.safetensors and "
                       "model.safetensors.index.json"))
      << both.status().message();
  // An index that names only model.safetensors (mlx-lm writes one) is the same weights.
  WriteIndex(dir.File("model.safetensors.index.json"), {{"a.weight", "model.safetensors"}});
  auto same = SafetensorsStore::Open(dir.path());
  ASSERT_TRUE(same.ok()) << same.status().ToString();
  EXPECT_NE((*same)->Find("a.weight"), nullptr);

  auto missing = SafetensorsStore::Open(dir.File("nope.safetensors"));
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(Contains(missing.status().message(), dir.File("nope.safetensors")));
}

// ---------------------------------------------------------------------------------------
// Real files (copies of shared/fixtures, see tests/fixtures/shared/PROVENANCE.md).

TEST(SafetensorsRealFileTest, F32FilesFromSwiftTransformersLoad) {
  struct Case {
    std::string file;
    std::vector<int64_t> shape;
    float first;
    float last;
  };
  for (const Case& c :
       std::vector<Case>{{"tensor-3d-float32.safetensors", {2, 2, 3}, 22.0f, 3.0f},
                         {"tensor-4d-float32.safetensors", {2, 3, 1, 3}, 11.0f, 19.0f}}) {
    SCOPED_TRACE(c.file);
    auto s = SafetensorsStore::Open(kShared + "/safetensors/" + c.file);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    EXPECT_EQ((*s)->names(), std::vector<std::string>{"embedding"});
    auto t = (*s)->Get("embedding");
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    EXPECT_EQ(t->dtype, DType::kF32);
    EXPECT_EQ(t->shape, c.shape);
    const float* v = static_cast<const float*>(t->data);
    for (int64_t i = 0; i < t->numel(); ++i) EXPECT_TRUE(std::isfinite(v[i])) << i;
    EXPECT_EQ(v[0], c.first);
    EXPECT_EQ(v[t->numel() - 1], c.last);
  }
}

TEST(SafetensorsRealFileTest, I32AndF64FilesParseButCannotBeComputedWith) {
  struct Case {
    std::string file;
    std::string dtype;
    std::vector<int64_t> shape;
  };
  for (const Case& c : std::vector<Case>{{"tensor-1d-int32.safetensors", "I32", {3}},
                                         {"tensor-2d-float64.safetensors", "F64", {2, 3}}}) {
    SCOPED_TRACE(c.file);
    const std::string path = kShared + "/safetensors/" + c.file;
    auto s = SafetensorsStore::Open(path);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    const TensorInfo* info = (*s)->Find("embedding");
    ASSERT_NE(info, nullptr);
    EXPECT_EQ(info->dtype_name, c.dtype);
    EXPECT_FALSE(info->dtype.has_value());
    EXPECT_EQ(info->shape, c.shape);
    auto t = (*s)->Get("embedding");
    ASSERT_FALSE(t.ok());
    EXPECT_TRUE(Contains(t.status().message(), "has dtype " + c.dtype));
    EXPECT_TRUE(Contains(t.status().message(), "'embedding'"));
    EXPECT_TRUE(Contains(t.status().message(), path));
  }
}

TEST(SafetensorsRealFileTest, EdgeAdaptersGitLfsPointers) {
  for (const char* dir : {"EDGE_gemma-3-270m__git-lfs-pointer-not-safetensors__Wiscarce",
                          "EDGE_phi-2__git-lfs-pointer-not-safetensors__Nabeegh-Ahmed"}) {
    SCOPED_TRACE(dir);
    const std::string path = kShared + "/adapters/" + dir + "/adapter_model.safetensors";
    auto s = SafetensorsStore::Open(path);
    ASSERT_FALSE(s.ok());
    EXPECT_TRUE(Contains(s.status().message(), path));
    EXPECT_TRUE(Contains(s.status().message(), "git-LFS"));
    // Found through the folder with the adapter stem as well.
    auto by_dir = SafetensorsStore::Open(kShared + "/adapters/" + dir, "adapter_model");
    ASSERT_FALSE(by_dir.ok());
    EXPECT_TRUE(Contains(by_dir.status().message(), "git-LFS"));
  }
}

TEST(SafetensorsRealFileTest, EdgeAdapterZeroBytes) {
  const std::string path =
      kShared + "/adapters/EDGE_nemotron__zero-byte-safetensors__Hastws/adapter_model.safetensors";
  ASSERT_TRUE(fs::exists(path));
  ASSERT_EQ(fs::file_size(path), 0u);
  auto s = SafetensorsStore::Open(path);
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(Contains(s.status().message(), path));
  EXPECT_TRUE(Contains(s.status().message(), "empty file"));
}

TEST(SafetensorsRealFileTest, PromptTuningAdapterIsAValidBf16File) {
  const std::string path = kShared +
                           "/adapters/EDGE_Phi-3.5-mini__PROMPT_TUNING-not-lora__hazemzidan4545/"
                           "adapter_model.safetensors";
  auto s = SafetensorsStore::Open(path);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ((*s)->metadata().at("format"), "pt");
  auto t = (*s)->Get("prompt_embeddings");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->dtype, DType::kBF16);
  EXPECT_EQ(t->shape, (std::vector<int64_t>{20, 3072}));
  std::vector<float> v(static_cast<size_t>(t->numel()));
  ConvertToF32(DType::kBF16, t->data, v.data(), t->numel());
  int nonzero = 0;
  for (float x : v) {
    ASSERT_TRUE(std::isfinite(x));
    nonzero += x != 0.0f;
  }
  EXPECT_GT(nonzero, t->numel() / 2);
}

}  // namespace
}  // namespace loom
