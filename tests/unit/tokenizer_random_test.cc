// Tokenizer parity with the HF tokenizers library on seeded random strings (tools/ref/
// make_tokenizer_random_vectors.py): every case's ids and decoded text must match exactly.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"
#include "unit/tokenizer_test_util.h"

namespace loom::tokenizer {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using test::ReadAll;
using test::Show;

const fs::path kTokenizers = fs::path(LOOM_FIXTURES) / "tokenizers";
const fs::path kRandom = fs::path(LOOM_FIXTURES) / "tokenizer_vectors" / "random";

// The text with every byte outside printable ASCII as \xNN, so whitespace and invisible
// characters show in a failure.
std::string Escape(const std::string& text) {
  std::string s;
  for (unsigned char c : text) {
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      s += static_cast<char>(c);
    } else {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02X", c);
      s += buf;
    }
  }
  return s;
}

std::vector<std::string> VectorFiles() {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(kRandom)) {
    if (e.path().extension() == ".json") names.push_back(e.path().stem().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

class RandomVectorsTest : public testing::TestWithParam<std::string> {};

TEST_P(RandomVectorsTest, EncodeAndDecodeMatchTheLibrary) {
  const json v = json::parse(ReadAll(kRandom / (GetParam() + ".json")));
  const std::string rel = v["tokenizer"].get<std::string>();
  auto loaded = Tokenizer::FromFile((kTokenizers / rel).string());
  ASSERT_TRUE(loaded.ok()) << rel << ": " << loaded.status().message();
  const Tokenizer& t = **loaded;
  ASSERT_FALSE(v["cases"].empty());
  int failures = 0;
  for (const json& c : v["cases"]) {
    const std::string text = c["text"].get<std::string>();
    const auto want = c["ids"].get<std::vector<int32_t>>();
    const auto want_special = c["ids_special"].get<std::vector<int32_t>>();
    auto ids = t.Encode(text, false);
    ASSERT_TRUE(ids.ok()) << Escape(text) << ": " << ids.status().message();
    auto ids_special = t.Encode(text, true);
    ASSERT_TRUE(ids_special.ok()) << Escape(text) << ": " << ids_special.status().message();
    bool ok = true;
    if (*ids != want) {
      ok = false;
      ADD_FAILURE() << "ids, text [" << Escape(text) << "]\n got " << Show(*ids) << "\nwant "
                    << Show(want);
    }
    if (*ids_special != want_special) {
      ok = false;
      ADD_FAILURE() << "ids_special, text [" << Escape(text) << "]\n got " << Show(*ids_special)
                    << "\nwant " << Show(want_special);
    }
    for (const auto& [key, skip] : {std::pair{"decoded", false}, std::pair{"decoded_skip", true}}) {
      const std::string got = t.Decode(want_special, skip);
      const std::string expected = c[key].get<std::string>();
      if (got != expected) {
        ok = false;
        ADD_FAILURE() << key << ", ids " << Show(want_special) << "\n got [" << Escape(got)
                      << "]\nwant [" << Escape(expected) << "]";
      }
    }
    if (!ok && ++failures >= 20) FAIL() << "stopping after 20 mismatching cases";
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, RandomVectorsTest, testing::ValuesIn(VectorFiles()),
                         [](const testing::TestParamInfo<std::string>& info) {
                           std::string name = info.param;
                           for (char& c : name) {
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           }
                           return name;
                         });

}  // namespace
}  // namespace loom::tokenizer
