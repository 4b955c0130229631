// Stopping a tokenization from outside (tokenizer::EncodeCancelScope): a real BPE tokenizer
// (Qwen2.5's) and a SentencePiece unigram one stop within kPollEvery units of work once the hook
// says so, in one long word (BPE merges, unigram positions) and in text of many words (regex
// matches, pre-tokens); a hook that never says so changes nothing. BuildPrompts stops a large
// prompt whose client leaves (a 400, counted) or when the drain deadline closes the gate (503).
#include <gtest/gtest.h>

#include <functional>
#include <random>
#include <string>

#include "server/prompt_builder.h"
#include "tokenizer/cancel.h"
#include "tokenizer/tokenizer.h"

namespace loom {
namespace {

const std::string kQwen = std::string(LOOM_FIXTURES) + "/tokenizers/Qwen2.5-0.5B-Instruct";
const std::string kUnigram = std::string(LOOM_FIXTURES) + "/tokenizers/spm-unigram-json";
const std::string kTinyLlama = std::string(LOOM_FIXTURES) + "/tokenizers/TinyLlama-1.1B-Chat-v1.0";

std::string RandomLetters(size_t n, bool words, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string s(n, 'a');
  for (char& c : s) c = static_cast<char>('a' + rng() % 26);
  if (words) {
    for (size_t i = 7; i < n; i += 1 + rng() % 9) s[i] = ' ';
  }
  return s;
}

class EncodeCancelTest : public testing::TestWithParam<std::string> {};

TEST_P(EncodeCancelTest, AHookThatSaysStopStopsTheEncodeAndOneThatDoesNotChangesNothing) {
  auto tok = tokenizer::Tokenizer::FromModelDir(GetParam());
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  for (bool words : {false, true}) {
    const std::string text = RandomLetters(256 << 10, words, words ? 3 : 4);
    auto plain = (*tok)->Encode(text, false);
    ASSERT_TRUE(plain.ok()) << plain.status().ToString();

    int calls = 0;
    std::function<bool()> never = [&] { return ++calls < 0; };
    {
      tokenizer::EncodeCancelScope scope(&never);
      auto ids = (*tok)->Encode(text, false);
      ASSERT_TRUE(ids.ok()) << ids.status().ToString();
      EXPECT_EQ(*ids, *plain) << "words " << words;
    }
    // A unit of work (a merge, a match, a pre-token) per few bytes, polled every kPollEvery.
    EXPECT_GE(calls, static_cast<int>(text.size() / tokenizer::kPollEvery / 8)) << words;

    for (int stop_at : {1, 5}) {
      int asked = 0;
      std::function<bool()> stop = [&] { return ++asked >= stop_at; };
      tokenizer::EncodeCancelScope scope(&stop);
      auto ids = (*tok)->Encode(text, false);
      ASSERT_FALSE(ids.ok()) << "words " << words;
      EXPECT_EQ(ids.status().code(), StatusCode::kUnavailable);
      EXPECT_NE(ids.status().message().find("cancelled"), std::string::npos)
          << ids.status().message();
      EXPECT_EQ(asked, stop_at) << "it stopped at the first yes";
    }
    // The scope closed: the same text encodes again in full; so it does under an empty hook.
    auto again = (*tok)->Encode(text, false);
    ASSERT_TRUE(again.ok());
    EXPECT_EQ(*again, *plain);
    std::function<bool()> empty;
    tokenizer::EncodeCancelScope scope(&empty);
    tokenizer::EncodeCancelScope none(nullptr);
    again = (*tok)->Encode(text, false);
    ASSERT_TRUE(again.ok());
    EXPECT_EQ(*again, *plain);
  }
}

TEST(EncodeCancel, ANestedScopeGivesTheOuterOneItsStateBack) {
  int outer_calls = 0, inner_calls = 0;
  std::function<bool()> outer = [&] { return ++outer_calls > 0; };
  std::function<bool()> inner = [&] { return ++inner_calls < 0; };
  tokenizer::EncodeCancelScope a(&outer);
  bool stopped = false;
  for (unsigned i = 0; i < tokenizer::kPollEvery && !stopped; ++i) {
    stopped = tokenizer::EncodeCancelled();
  }
  ASSERT_TRUE(stopped);
  {
    tokenizer::EncodeCancelScope b(&inner);
    for (unsigned i = 0; i < 3 * tokenizer::kPollEvery; ++i)
      EXPECT_FALSE(tokenizer::EncodeCancelled());
    EXPECT_EQ(inner_calls, 3);
    tokenizer::EncodeCancelScope none(nullptr);  // no hook: nothing is polled
    for (unsigned i = 0; i < 2 * tokenizer::kPollEvery; ++i)
      EXPECT_FALSE(tokenizer::EncodeCancelled());
  }
  EXPECT_TRUE(tokenizer::EncodeCancelled()) << "the outer scope had said stop";
  EXPECT_EQ(outer_calls, 1);
  EXPECT_EQ(inner_calls, 3);
}

INSTANTIATE_TEST_SUITE_P(Tokenizers, EncodeCancelTest, testing::Values(kQwen, kUnigram));

TEST(EncodeCancel, BuildPromptsStopsWhenTheClientLeavesOrTheGateCloses) {
  auto tok = tokenizer::Tokenizer::FromModelDir(kTinyLlama);  // loads in a fifth of Qwen's time
  ASSERT_TRUE(tok.ok());
  server::ServerContext ctx;
  ctx.tokenizer = tok->get();
  ctx.max_model_len = 1 << 20;
  for (bool large : {true, false}) {
    server::OpenAiRequest r;
    r.prompts = {RandomLetters(large ? server::EncodeGate::kLargeBytes + 1000 : 100000, false, 6)};
    int polls = 0;
    std::function<bool()> gone = [&] { return ++polls > 2; };  // leaves during the tokenizing
    std::vector<std::vector<int32_t>> prompts;
    server::ApiError error;
    const int64_t before = ctx.encode_gate.abandoned();
    EXPECT_FALSE(server::BuildPrompts(ctx, r, &prompts, &error, gone));
    EXPECT_EQ(error.http_status, 400);
    EXPECT_NE(error.message.find("closed the connection"), std::string::npos) << error.message;
    EXPECT_TRUE(prompts.empty());
    // Counted only where the text held the large-prompt gate; the gate is free again.
    EXPECT_EQ(ctx.encode_gate.abandoned(), before + (large ? 1 : 0));
    EXPECT_FALSE(ctx.encode_gate.busy());
  }
  // A client that stays gets its prompt.
  server::OpenAiRequest r;
  r.prompts = {RandomLetters(server::EncodeGate::kLargeBytes + 1000, true, 8)};
  int polls = 0;
  std::function<bool()> stays = [&] { return ++polls < 0; };
  std::vector<std::vector<int32_t>> prompts;
  server::ApiError error;
  ASSERT_TRUE(server::BuildPrompts(ctx, r, &prompts, &error, stays)) << error.message;
  EXPECT_EQ(prompts.size(), 1u);
  // The drain deadline (the gate closes) while it is tokenized: stopped there, a 503, and not
  // counted as abandoned.
  const int64_t before = ctx.encode_gate.abandoned();
  polls = 0;
  std::function<bool()> closes = [&] {
    if (++polls == 2) ctx.encode_gate.Close();
    return false;
  };
  prompts.clear();
  EXPECT_FALSE(server::BuildPrompts(ctx, r, &prompts, &error, closes));
  EXPECT_EQ(error.http_status, 503);
  EXPECT_NE(error.message.find("shutting down"), std::string::npos) << error.message;
  EXPECT_GT(polls, 2) << "polled on after the close";
  EXPECT_EQ(ctx.encode_gate.abandoned(), before);
}

}  // namespace
}  // namespace loom
