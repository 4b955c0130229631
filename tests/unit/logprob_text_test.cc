// Log-prob token texts: vLLM 0.32's own functions' output on real tokenizers, id by id.
#include "server/logprob_text.h"

#include <gtest/gtest.h>

#include <filesystem>

#include <nlohmann/json.hpp>

#include "base/file.h"

namespace loom::server {
namespace {

const std::filesystem::path kFixtures = std::filesystem::path(LOOM_FIXTURES);

// Expected: tools/ref/make_logprob_tokens.py — vLLM 0.32's convert_ids_list_to_tokens and
// LogprobsProcessor._correct_decoded_token over transformers' tokenizer of each fixture: texts
// with SentencePiece words (" The", not "The"), byte-fallback CJK and emoji ("", "", "", "😀"),
// byte-level BPE pieces of characters, special tokens, and random ids; each position with the
// up to 4 ids before it as context.
TEST(LogprobText, EachTokenAsVllmWritesIt) {
  auto text = ReadFileBounded((kFixtures / "detokenizer" / "logprob_tokens.json").string(), 1 << 20);
  ASSERT_TRUE(text.ok()) << text.status().message();
  const auto doc = nlohmann::json::parse(*text);
  int checked = 0, restored = 0, rebuilt = 0;
  for (const auto& [name, cases] : doc["cases"].items()) {
    // As the server loads it (transformers 5's pipeline: Phi-3's legacy=false is a Metaspace).
    const auto dir = (kFixtures / "tokenizers" / name).parent_path();
    auto tok = tokenizer::Tokenizer::FromModelDir(dir.string());
    ASSERT_TRUE(tok.ok()) << name << ": " << tok.status().message();
    for (const auto& c : cases) {
      const auto ids = c["ids"].get<std::vector<int32_t>>();
      const auto want = c["texts"].get<std::vector<std::string>>();
      for (size_t i = 0; i < ids.size(); ++i) {
        const std::string got = LogprobTokenText(**tok, ids[i], LogprobContext(ids, i));
        ASSERT_EQ(got, want[i]) << name << " id " << ids[i] << " at " << i << " of "
                                << c["ids"].dump();
        const int32_t one[1] = {ids[i]};
        const std::string alone = (*tok)->Decode(std::span<const int32_t>(one, 1), false);
        restored += got.size() > alone.size() && got.compare(got.size() - alone.size(),
                                                             alone.size(), alone) == 0;
        rebuilt += alone.find("\xEF\xBF\xBD") != std::string::npos;
        ++checked;
      }
    }
  }
  EXPECT_GT(checked, 500);
  EXPECT_GT(restored, 10);  // the cases exercise both rules
  EXPECT_GT(rebuilt, 10);
}

TEST(LogprobText, ContextIsTheFourIdsBeforeNotBeforeFirst) {
  const std::vector<int32_t> ids = {10, 11, 12, 13, 14, 15};
  auto span = [](std::span<const int32_t> s) { return std::vector<int32_t>(s.begin(), s.end()); };
  EXPECT_TRUE(LogprobContext(ids, 0).empty());
  EXPECT_EQ(span(LogprobContext(ids, 2)), (std::vector<int32_t>{10, 11}));
  EXPECT_EQ(span(LogprobContext(ids, 5)), (std::vector<int32_t>{11, 12, 13, 14}));
  EXPECT_EQ(span(LogprobContext(ids, 2, 1)), (std::vector<int32_t>{11}));
  EXPECT_TRUE(LogprobContext(ids, 1, 1).empty());
}

}  // namespace
}  // namespace loom::server
