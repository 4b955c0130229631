// Streaming detokenizer: pieces concatenate to the full decode and are always whole UTF-8.
#include "tokenizer/detokenizer.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <random>

#include "tokenizer/unicode.h"

namespace loom::tokenizer {
namespace {

const std::filesystem::path kTokenizers = std::filesystem::path(LOOM_FIXTURES) / "tokenizers";

class DetokenizerTest : public testing::TestWithParam<const char*> {};

TEST_P(DetokenizerTest, RandomIdsStreamToTheFullDecode) {
  auto t = Tokenizer::FromFile((kTokenizers / GetParam()).string());
  ASSERT_TRUE(t.ok()) << t.status().message();
  const Tokenizer& tok = **t;
  std::mt19937 rng(7);
  std::vector<int32_t> specials;
  for (const AddedToken& a : tok.added_tokens()) specials.push_back(a.id);
  // Byte tokens (<0xNN> or byte-level single characters) make partial characters likely.
  std::vector<int32_t> bytes;
  for (int32_t id = 0; id < tok.id_limit(); ++id) {
    const std::string* s = tok.IdToToken(id);
    if (s != nullptr && ((s->size() == 6 && s->compare(0, 3, "<0x") == 0) ||
                         (s->size() <= 2 && CharToByte(s->empty() ? 0 : [&] {
                                              size_t p = 0;
                                              return NextCodePoint(*s, &p);
                                            }()) >= 0x80))) {
      bytes.push_back(id);
    }
  }
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<int32_t> ids;
    const int n = 1 + static_cast<int>(rng() % 40);
    for (int i = 0; i < n; ++i) {
      const uint32_t kind = rng() % 10;
      if (kind == 0 && !specials.empty()) {
        ids.push_back(specials[rng() % specials.size()]);
      } else if (kind < 5 && !bytes.empty()) {
        ids.push_back(bytes[rng() % bytes.size()]);
      } else {
        ids.push_back(static_cast<int32_t>(rng() % tok.id_limit()));
      }
    }
    for (bool skip : {false, true}) {
      StreamingDetokenizer d(&tok, skip);
      std::string streamed;
      for (int32_t id : ids) {
        const std::string piece = d.Add(id);
        ASSERT_TRUE(IsValidUtf8(piece));
        streamed += piece;
      }
      const std::string rest = d.Finish();
      ASSERT_TRUE(IsValidUtf8(rest));
      streamed += rest;
      ASSERT_EQ(streamed, tok.Decode(ids, skip)) << "trial " << trial << " skip " << skip;
    }
  }
}

TEST_P(DetokenizerTest, MultiByteTextNeverEmitsReplacementCharacters) {
  auto t = Tokenizer::FromFile((kTokenizers / GetParam()).string());
  ASSERT_TRUE(t.ok());
  const std::string text = "日本語 😀 émoji 👨‍👩‍👧 and ünïcode, ok";
  auto ids = (*t)->Encode(text, false);
  ASSERT_TRUE(ids.ok());
  StreamingDetokenizer d(t->get(), true);
  std::string streamed;
  for (int32_t id : *ids) {
    const std::string piece = d.Add(id);
    EXPECT_EQ(piece.find("\xEF\xBF\xBD"), std::string::npos);
    streamed += piece;
  }
  streamed += d.Finish();
  EXPECT_EQ(streamed, (*t)->Decode(*ids, true));
}

// A long run of ids whose text keeps ending in an unfinished character (lone UTF-8 continuation
// bytes), then ordinary text: the streamed text still equals the one-shot decode, and the run
// costs linear decode work (the quadratic version takes minutes here and hits the ctest timeout).
TEST_P(DetokenizerTest, LongInvalidRunStreamsToTheFullDecode) {
  auto t = Tokenizer::FromFile((kTokenizers / GetParam()).string());
  ASSERT_TRUE(t.ok());
  const Tokenizer& tok = **t;
  int32_t invalid = -1;  // an id that decodes alone to U+FFFD (a lone lead/continuation byte)
  for (int32_t id = 0; id < tok.id_limit() && invalid < 0; ++id) {
    const int32_t one[] = {id};
    if (!tok.IsSpecial(id) && tok.Decode(one, false) == "\xEF\xBF\xBD") invalid = id;
  }
  if (invalid < 0) GTEST_SKIP() << "no id decodes to U+FFFD alone";
  auto tail = tok.Encode(" and then plain words.", false);
  ASSERT_TRUE(tail.ok());
  std::vector<int32_t> ids(40000, invalid);
  ids.insert(ids.end(), tail->begin(), tail->end());
  StreamingDetokenizer d(&tok, true);
  std::string streamed;
  for (int32_t id : ids) streamed += d.Add(id);
  streamed += d.Finish();
  EXPECT_EQ(streamed, tok.Decode(ids, true));
}

// Primed with the prompt, the generated text continues it as vLLM's detokenizer gives it: the
// SentencePiece "▁" of the first generated token is a space (decoded alone, Metaspace's first-
// token rule drops it: "Paris." where vLLM answers " Paris."). Expected: HF tokenizers 0.23.3's
// DecodeStream(skip_special_tokens=True) stepped through vLLM's prompt window (the shortest of
// the last 4-23 ids whose text has no U+FFFD, or the whole prompt of ≤ 4), then the generated
// ids (TinyLlama's tokenizer.json; prompts encoded with special tokens, continuations without).
TEST(DetokenizerPrimed, GeneratedTextContinuesThePromptAsVllmDecodesIt) {
  auto t = Tokenizer::FromFile((kTokenizers / "TinyLlama-1.1B-Chat-v1.0/tokenizer.json").string());
  ASSERT_TRUE(t.ok());
  struct Case {
    std::vector<int32_t> prompt, generated;
    std::string text;
  };
  const Case cases[] = {
      {{1, 450, 7483, 310, 3444, 338}, {3681, 29889, 29871, 30325, 30346}, " Paris. 日本"},
      {{1, 15043, 6365}, {301, 29881, 29991, 29871, 243, 162, 155, 131, 3431}, " ld! 😀 ok"},
      {{1, 450}, {4996, 17354}, " quick brown"},
      {{1, 529, 29989, 1792, 29989, 29958, 13, 18567, 2, 29871, 13, 29966, 29989, 465, 22137, 29989,
        29958, 13},
       {15043, 727, 2},
       " Hello there"},
      {{1, 263, 289, 274, 270, 321, 285, 330, 298, 474, 432, 413, 301, 286, 302, 288, 282, 3855,
        364, 269, 260, 318, 325, 281, 921, 343, 503},
       {29871, 13, 13, 29871, 1399, 14927},
       " \n\n  indented"},
  };
  for (const Case& c : cases) {
    StreamingDetokenizer d(t->get(), true);
    d.Prime(c.prompt);
    std::string streamed;
    for (int32_t id : c.generated) streamed += d.Add(id);
    streamed += d.Finish();
    EXPECT_EQ(streamed, c.text);
    // Unprimed: the generated ids' own decode (what transformers' decode(generated) gives).
    StreamingDetokenizer alone(t->get(), true);
    std::string own;
    for (int32_t id : c.generated) own += alone.Add(id);
    own += alone.Finish();
    EXPECT_EQ(own, (*t)->Decode(c.generated, true));
  }
}

// Peek: what a held run of <0xNN> tokens would give if it ended now (the engine probes it for
// stop strings), only when it is whole characters; nothing changes.
TEST(DetokenizerPrimed, PeekShowsAHeldValidByteRunOnly) {
  auto t = Tokenizer::FromFile((kTokenizers / "TinyLlama-1.1B-Chat-v1.0/tokenizer.json").string());
  ASSERT_TRUE(t.ok());
  StreamingDetokenizer d(t->get(), true);
  const std::vector<int32_t> prompt = {1, 450, 7483, 310, 3444, 338};
  d.Prime(prompt);
  EXPECT_EQ(d.Add(35), "");  // <0x20>: held (the run may continue)
  EXPECT_EQ(d.Peek(), " ");
  EXPECT_EQ(d.Add(13), "");  // <0x0A>
  EXPECT_EQ(d.Peek(), " \n");
  EXPECT_EQ(d.Add(233), "");  // <0xE6>: an unfinished character ends the held text
  EXPECT_EQ(d.Peek(), "");
  EXPECT_EQ(d.Add(240), "");  // <0xED>: invalid after 0xE6
  EXPECT_EQ(d.Peek(), "");
  // The run ends: ByteFallback judges it whole, and an invalid run is one U+FFFD per byte, the
  // space and newline included (HF tokenizers' decode gives the same) — why a valid prefix is
  // only peeked at, never released early.
  const std::string bad = "\xEF\xBF\xBD";
  EXPECT_EQ(d.Add(3681), bad + bad + bad + bad + " Paris");
  EXPECT_EQ(d.Peek(), "");
}

INSTANTIATE_TEST_SUITE_P(Tokenizers, DetokenizerTest,
                         testing::Values("gpt2/tokenizer.json",
                                         "TinyLlama-1.1B-Chat-v1.0/tokenizer.json",
                                         "Mistral-7B-Instruct-v0.3/tokenizer.json",
                                         "Qwen2.5-0.5B-Instruct/tokenizer.json",
                                         "SmolLM-135M-Instruct/tokenizer.json",
                                         "custom-bpe-whitespace-Abhay557/tokenizer.json"));

}  // namespace
}  // namespace loom::tokenizer
