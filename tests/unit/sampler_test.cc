// Sampler: greedy, seeds, top-k/top-p/min-p filtering, penalties, sampling frequencies, validation.
#include "engine/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <random>

namespace loom {
namespace {

std::vector<float> Logits(int vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.5f, 2.0f);
  std::vector<float> v(vocab);
  for (auto& x : v) x = d(rng);
  return v;
}

int32_t Draw(const SamplingParams& p, std::vector<float> logits, Sampler* s) {
  auto t = s->Sample(logits.data(), static_cast<int>(logits.size()), nullptr, nullptr);
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return t.ok() ? *t : -1;
}

TEST(Sampler, GreedyIsArgmax) {
  SamplingParams p;
  p.temperature = 0;
  auto l = Logits(1000, 1);
  Sampler s(p, {1, 2});
  EXPECT_EQ(Draw(p, l, &s), std::max_element(l.begin(), l.end()) - l.begin());
}

// SPEC-api: temperature ≤ 0 is greedy; a negative one validates and draws the argmax.
TEST(Sampler, NegativeTemperatureIsGreedy) {
  for (float t : {-0.5f, -100.0f, -std::numeric_limits<float>::infinity()}) {
    SamplingParams p;
    p.temperature = t;
    p.seed = 7;
    ASSERT_TRUE(p.Validate(1000).ok()) << t;
    for (int i = 0; i < 8; ++i) {
      auto l = Logits(1000, 10 + i);
      Sampler s(p, {});
      EXPECT_EQ(Draw(p, l, &s), std::max_element(l.begin(), l.end()) - l.begin()) << t;
    }
  }
}

TEST(Sampler, SameSeedSameTokensDifferentSeedDifferent) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.seed = 42;
  auto run = [&](uint64_t seed) {
    p.seed = seed;
    Sampler s(p, {});
    std::vector<int32_t> out;
    for (int i = 0; i < 50; ++i) out.push_back(Draw(p, Logits(100, 100 + i), &s));
    return out;
  };
  EXPECT_EQ(run(42), run(42));
  EXPECT_NE(run(42), run(43));
}

TEST(Sampler, FiltersThatKeepOnlyTheTopTokenAreGreedy) {
  auto l = Logits(500, 2);
  const int32_t best = std::max_element(l.begin(), l.end()) - l.begin();
  for (int variant = 0; variant < 3; ++variant) {
    SamplingParams p;
    p.temperature = 1.5f;
    p.seed = variant;
    if (variant == 0) p.top_k = 1;
    if (variant == 1) p.top_p = 1e-6f;
    if (variant == 2) p.min_p = 1.0f;
    Sampler s(p, {});
    for (int i = 0; i < 20; ++i) EXPECT_EQ(Draw(p, l, &s), best) << variant;
  }
}

// min_p 1 keeps the top token at any temperature: its floor is the top probability as computed
// (the vector pass fuses logit·(1/T) − max, so the top was 1 − 6e-8 against a floor of 1, and at
// T ≠ 1 most rows had no candidate left: a 500 for a valid request).
TEST(Sampler, MinP1KeepsTheTopTokenAtAnyTemperature) {
  for (int vocab : {256, 3000, 32000}) {
    for (float t : {0.3f, 0.7f, 1.5f, 2.9f}) {
      for (int row = 0; row < 20; ++row) {
        auto l = Logits(vocab, 1000 + row);
        for (float& x : l) x *= 3.7f;  // logits well away from small integers
        const int32_t best = std::max_element(l.begin(), l.end()) - l.begin();
        SamplingParams p;
        p.temperature = t;
        p.min_p = 1.0f;
        p.seed = row;
        Sampler s(p, {});
        ASSERT_EQ(Draw(p, l, &s), best) << "vocab " << vocab << " T " << t << " row " << row;
      }
    }
  }
}

// Empirical frequencies follow softmax(logits / T) restricted to the top-k tokens.
TEST(Sampler, FrequenciesFollowTemperatureAndTopK) {
  const std::vector<float> l = {2.0f, 1.0f, 0.5f, -1.0f, 0.0f};
  SamplingParams p;
  p.temperature = 0.7f;
  p.top_k = 3;
  p.seed = 7;
  Sampler s(p, {});
  std::map<int, int> counts;
  const int draws = 20000;
  for (int i = 0; i < draws; ++i) ++counts[Draw(p, l, &s)];
  double z = 0;
  for (int t : {0, 1, 2}) z += std::exp(l[t] / 0.7);
  for (int t : {0, 1, 2}) {
    const double expect = std::exp(l[t] / 0.7) / z;
    EXPECT_NEAR(counts[t] / double(draws), expect, 0.015) << t;
  }
  EXPECT_EQ(counts[3] + counts[4], 0);
}

TEST(Sampler, TopPKeepsSmallestPrefixReachingMass) {
  // probs ≈ {0.64, 0.24, 0.09, 0.03}; top_p = 0.7 keeps the first two.
  const std::vector<float> l = {3.0f, 2.0f, 1.0f, -0.1f};
  SamplingParams p;
  p.top_p = 0.7f;
  p.seed = 3;
  Sampler s(p, {});
  std::map<int, int> counts;
  for (int i = 0; i < 5000; ++i) ++counts[Draw(p, l, &s)];
  EXPECT_GT(counts[0], 0);
  EXPECT_GT(counts[1], 0);
  EXPECT_EQ(counts[2] + counts[3], 0);
}

TEST(Sampler, PenaltiesFollowVllmFormulas) {
  SamplingParams p;
  p.temperature = 0;
  p.repetition_penalty = 2.0f;
  p.presence_penalty = 0.5f;
  p.frequency_penalty = 0.25f;
  p.logprobs = 0;
  // Token 0 is in the prompt; token 1 was generated twice; token 2 untouched.
  Sampler s(p, {0});
  s.Accept(1);
  s.Accept(1);
  // Make the penalised tokens' outcome decide the argmax.
  std::vector<float> l = {3.0f, 2.9f, 1.4f};
  // 0: 3/2 = 1.5; 1: 2.9/2 - 0.25*2 - 0.5 = 0.45; 2: 1.4.
  EXPECT_EQ(Draw(p, l, &s), 0);
  std::vector<float> neg = {-1.0f, 1.0f, 0.9f};
  // 0: -1*2 = -2; 1: 0.5 - 1.0 = -0.5; 2: 0.9 → 2 wins.
  EXPECT_EQ(Draw(p, neg, &s), 2);
}

// A valid but tiny repetition_penalty (> 0) divides a positive logit past f32's range: the
// result stays finite (it was +inf, which the non-finite check reported as a broken model).
TEST(Sampler, ATinyRepetitionPenaltyKeepsLogitsFinite) {
  SamplingParams p;
  p.temperature = 0;
  p.repetition_penalty = 1e-38f;
  p.logprobs = 0;
  Sampler s(p, {1});
  std::vector<float> l = {3.0f, 4.0f, -1.0f};
  const auto t = Draw(p, l, &s);
  EXPECT_EQ(t, 1);  // 4 / 1e-38 = 4e38 overflows f32 (+inf before): FLT_MAX now, the largest
}

TEST(Sampler, LogprobsComeFromTheUnpenalisedDistribution) {
  SamplingParams p;
  p.temperature = 0;
  p.logprobs = 3;
  p.repetition_penalty = 5.0f;
  const std::vector<float> l = {1.0f, 2.0f, 0.5f, -3.0f};
  Sampler s(p, {1});
  std::vector<float> work = l;
  TokenLogprob chosen{};
  std::vector<TokenLogprob> top;
  const auto t = s.Sample(work.data(), 4, &chosen, &top);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(*t, 0);  // 2.0 / 5 = 0.4 < 1.0
  double z = 0;
  for (float v : l) z += std::exp(double(v));
  ASSERT_EQ(top.size(), 3u);
  EXPECT_EQ(top[0].token, 1);
  EXPECT_EQ(top[1].token, 0);
  EXPECT_EQ(top[2].token, 2);
  EXPECT_NEAR(top[0].logprob, 2.0 - std::log(z), 1e-5);
  EXPECT_NEAR(chosen.logprob, 1.0 - std::log(z), 1e-5);
}

// logit_bias moves the greedy choice and comes before the penalties (vLLM's order); the
// log-probs stay those of the raw logits.
TEST(Sampler, LogitBiasComesBeforePenaltiesAndLeavesLogprobsRaw) {
  SamplingParams p;
  p.temperature = 0;
  p.logprobs = 2;
  p.logit_bias = {{2, 3.0f}};
  const std::vector<float> l = {1.0f, 2.0f, 0.5f, -3.0f};
  Sampler s(p, {});
  std::vector<float> work = l;
  TokenLogprob chosen{};
  std::vector<TokenLogprob> top;
  auto t = s.Sample(work.data(), 4, &chosen, &top);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(*t, 2);  // 0.5 + 3 = 3.5 > 2.0
  double z = 0;
  for (float v : l) z += std::exp(double(v));
  EXPECT_NEAR(chosen.logprob, 0.5 - std::log(z), 1e-5);
  ASSERT_EQ(top.size(), 2u);
  EXPECT_EQ(top[0].token, 1);  // the raw ranking, not the biased one
  // Before the repetition penalty: token 0 (in the prompt) 1 + 1 = 2, / 2 = 1.0 < token 1's
  // 1.2; the other order (1 / 2 + 1 = 1.5) would pick token 0.
  SamplingParams q;
  q.temperature = 0;
  q.repetition_penalty = 2.0f;
  q.logit_bias = {{0, 1.0f}};
  Sampler r(q, {0});
  EXPECT_EQ(Draw(q, {1.0f, 1.2f, -1.0f}, &r), 1);
  // -100 takes the maximum down below the others.
  SamplingParams b;
  b.temperature = 0;
  b.logit_bias = {{0, -100.0f}};
  Sampler u(b, {});
  EXPECT_EQ(Draw(b, {50.0f, 1.0f, -30.0f}, &u), 1);
}

// min_tokens: the stop tokens (EOS and stop_token_ids, handed in by the engine) cannot be drawn
// for the first min_tokens steps, whatever the sampling mode; then they can. Log-probs are raw.
TEST(Sampler, MinTokensHoldsBackStopTokensForTheFirstSteps) {
  for (float temperature : {0.0f, 1.0f}) {
    SamplingParams p;
    p.temperature = temperature;
    p.seed = 3;
    p.min_tokens = 3;
    p.logprobs = 1;
    Sampler s(p, {}, {1, 3});
    const std::vector<float> l = {-2.0f, 30.0f, -1.0f, 29.0f};  // 1 and 3 take all the mass
    for (int step = 0; step < 5; ++step) {
      std::vector<float> work = l;
      TokenLogprob chosen{};
      std::vector<TokenLogprob> top;
      auto t = s.Sample(work.data(), 4, &chosen, &top);
      ASSERT_TRUE(t.ok()) << t.status().ToString();
      if (step < 3) {
        if (temperature == 0) {
          EXPECT_EQ(*t, 2) << "step " << step;  // the best token that is not a stop token
        } else {
          EXPECT_TRUE(*t == 0 || *t == 2) << "step " << step << " drew stop token " << *t;
        }
      } else if (temperature == 0) {
        EXPECT_EQ(*t, 1) << "step " << step;
      }
      ASSERT_EQ(top.size(), 1u);
      EXPECT_EQ(top[0].token, 1);
      s.Accept(*t);
    }
  }
  // A row with only stop tokens left is an error, not a stop token.
  SamplingParams p;
  p.temperature = 0;
  p.min_tokens = 1;
  Sampler s(p, {}, {0, 1});
  std::vector<float> l = {1.0f, 2.0f};
  EXPECT_FALSE(s.Sample(l.data(), 2, nullptr, nullptr).ok());
}

// allowed_token_ids: only those tokens are drawn, greedy or not, whatever the bias or the
// penalties do to the others; log-probs stay those of the raw row (vLLM's raw_logprobs).
TEST(Sampler, AllowedTokenIdsMaskEveryOtherTokenAndLeaveLogprobsRaw) {
  const std::vector<float> l = Logits(5003, 9);
  const int best = static_cast<int>(std::max_element(l.begin(), l.end()) - l.begin());
  const std::vector<int32_t> allowed = {7, 4000, 4001, 5002};
  for (float temperature : {0.0f, 1.0f, 3.0f}) {
    SamplingParams p;
    p.temperature = temperature;
    p.seed = 11;
    p.logprobs = 2;
    p.allowed_token_ids = std::make_shared<const std::vector<int32_t>>(allowed);
    p.logit_bias = {{static_cast<int32_t>(best), 50.0f}};  // a bias does not lift the mask
    Sampler s(p, {});
    std::map<int32_t, int> seen;
    for (int i = 0; i < 400; ++i) {
      std::vector<float> work = l;
      TokenLogprob chosen{};
      std::vector<TokenLogprob> top;
      auto t = s.Sample(work.data(), 5003, &chosen, &top);
      ASSERT_TRUE(t.ok()) << t.status().ToString();
      ASSERT_TRUE(std::binary_search(allowed.begin(), allowed.end(), *t)) << *t;
      ++seen[*t];
      TokenLogprob raw{};
      std::vector<TokenLogprob> raw_top;
      ComputeLogprobs(l.data(), 5003, *t, 2, &raw, &raw_top);
      EXPECT_EQ(chosen.logprob, raw.logprob);
      ASSERT_EQ(top.size(), 2u);
      EXPECT_EQ(top[0].token, best);  // the raw row's, not the masked one's
      if (temperature == 0) {
        int32_t want = allowed[0];
        for (int32_t a : allowed) want = l[a] > l[want] ? a : want;
        EXPECT_EQ(*t, want);
      }
    }
    if (temperature == 3.0f) {
      EXPECT_EQ(seen.size(), allowed.size());  // all of them, nothing else
    }
  }
}

// bad_words' token sequences (vLLM's _apply_bad_words_single_batch): a one-token word is never
// drawn; a longer word's last token is barred only right after the rest of it was generated,
// and the prompt does not count.
TEST(Sampler, BadWordsBarTheLastTokenAfterTheRestWasGenerated) {
  const std::vector<float> l = {0.0f, 5.0f, 4.0f, 3.0f, 2.0f};  // greedy order 1, 2, 3, 4, 0
  SamplingParams p;
  p.temperature = 0;
  p.bad_words_token_ids = {{1}, {3, 2}, {4, 3, 2}};
  Sampler s(p, /*prompt=*/{3});
  auto next = [&] {
    std::vector<float> work = l;
    auto t = s.Sample(work.data(), 5, nullptr, nullptr);
    EXPECT_TRUE(t.ok());
    return t.ok() ? *t : -1;
  };
  EXPECT_EQ(next(), 2);  // 1 barred; the prompt's 3 does not start "3 2"
  s.Accept(3);           // as if 3 were drawn: "3 2" completes next
  EXPECT_EQ(next(), 3);
  s.Accept(4);
  EXPECT_EQ(next(), 2);  // after 4 alone neither word is one token from done
  s.Accept(3);           // "4 3" then 2 would complete "4 3 2", "3" then 2 would complete "3 2"
  EXPECT_EQ(next(), 3);
}

// When the request's constraints leave nothing to draw the sampler says so apart from a broken
// row (kFailedPrecondition: the engine ends the sequence with "stop"); a row the model made all
// -inf stays an error of the model.
TEST(Sampler, ConstraintsThatLeaveNothingAreNotTheModelsError) {
  SamplingParams p;
  p.temperature = 0;
  p.allowed_token_ids = std::make_shared<const std::vector<int32_t>>(std::vector<int32_t>{1});
  p.bad_words_token_ids = {{1, 1}};
  Sampler s(p, {});
  std::vector<float> l = {3.0f, 1.0f, 2.0f};
  auto first = s.Sample(l.data(), 3, nullptr, nullptr);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_EQ(*first, 1);
  s.Accept(1);
  l = {3.0f, 1.0f, 2.0f};
  auto second = s.Sample(l.data(), 3, nullptr, nullptr);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kFailedPrecondition) << second.status().ToString();
  Sampler t(p, {});
  std::vector<float> dead(3, -INFINITY);
  EXPECT_EQ(t.Sample(dead.data(), 3, nullptr, nullptr).status().code(),
            StatusCode::kInvalidArgument);
}

// The top-n list against a partial_sort of every index (larger first, equal logits in token
// order), with many ties, −inf entries and n up to 20; log-probs against a double log-softmax.
TEST(Sampler, TopLogprobsAreTheLargestInTokenOrderOnTies) {
  std::mt19937 rng(5);
  std::uniform_int_distribution<int> coarse(-6, 6);
  for (int vocab : {1, 7, 40, 5003, 151936}) {
    std::vector<float> l(static_cast<size_t>(vocab));
    for (auto& v : l) v = 0.5f * static_cast<float>(coarse(rng));
    if (vocab > 3) l[2] = -INFINITY;
    for (int n : {1, 5, 20}) {
      if (n > vocab) continue;
      std::vector<int32_t> idx(static_cast<size_t>(vocab));
      for (int i = 0; i < vocab; ++i) idx[static_cast<size_t>(i)] = i;
      std::partial_sort(idx.begin(), idx.begin() + n, idx.end(), [&](int32_t a, int32_t b) {
        return l[a] > l[b] || (l[a] == l[b] && a < b);
      });
      double z = 0;
      for (float v : l) z += std::exp(double(v));
      TokenLogprob chosen{};
      std::vector<TokenLogprob> top;
      ComputeLogprobs(l.data(), vocab, 0, n, &chosen, &top);
      ASSERT_EQ(top.size(), static_cast<size_t>(n)) << vocab;
      for (int i = 0; i < n; ++i) {
        EXPECT_EQ(top[static_cast<size_t>(i)].token, idx[static_cast<size_t>(i)])
            << vocab << " " << n << " " << i;
        EXPECT_NEAR(top[static_cast<size_t>(i)].logprob,
                    l[idx[static_cast<size_t>(i)]] - std::log(z), 1e-5);
      }
      EXPECT_NEAR(chosen.logprob, l[0] - std::log(z), 1e-5);
    }
  }
}

// A prompt token's rank is how many logits are at or above its own (vLLM's
// batched_count_greater_than: x >= value), so a tie ranks after everything it ties with.
TEST(Sampler, TokenRankCountsTiesAsVllm) {
  const std::vector<float> l = {1.0f, 3.0f, 2.0f, 3.0f, 3.0f, -INFINITY};
  EXPECT_EQ(TokenRank(l.data(), 6, 1), 3);
  EXPECT_EQ(TokenRank(l.data(), 6, 4), 3);
  EXPECT_EQ(TokenRank(l.data(), 6, 2), 4);
  EXPECT_EQ(TokenRank(l.data(), 6, 0), 5);
  EXPECT_EQ(TokenRank(l.data(), 6, 5), 6);
}

TEST(Sampler, ValidateNamesTheField) {
  struct Case {
    void (*set)(SamplingParams&);
    const char* field;
  } cases[] = {
      {[](SamplingParams& p) { p.max_tokens = 0; }, "max_tokens"},
      {[](SamplingParams& p) { p.temperature = 101; }, "temperature"},
      {[](SamplingParams& p) { p.temperature = std::nanf(""); }, "temperature"},
      {[](SamplingParams& p) { p.top_p = 1.5f; }, "top_p"},
      {[](SamplingParams& p) { p.top_p = 0; }, "top_p"},
      {[](SamplingParams& p) { p.min_p = 2; }, "min_p"},
      {[](SamplingParams& p) { p.top_k = -2; }, "top_k"},
      {[](SamplingParams& p) { p.repetition_penalty = 0; }, "repetition_penalty"},
      {[](SamplingParams& p) { p.presence_penalty = 3; }, "presence_penalty"},
      {[](SamplingParams& p) { p.frequency_penalty = -3; }, "frequency_penalty"},
      {[](SamplingParams& p) { p.logprobs = 21; }, "logprobs"},
      {[](SamplingParams& p) { p.min_tokens = 17; }, "min_tokens"},  // > max_tokens 16
      {[](SamplingParams& p) { p.min_tokens = -1; }, "min_tokens"},
      {[](SamplingParams& p) {
         p.logit_bias = {{100, 1.0f}};
       },
       "logit_bias"},
      {[](SamplingParams& p) {
         p.logit_bias = {{-1, 1.0f}};
       },
       "logit_bias"},
      {[](SamplingParams& p) {
         p.logit_bias = {{3, 101.0f}};
       },
       "logit_bias"},
      {[](SamplingParams& p) {
         p.allowed_token_ids = std::make_shared<const std::vector<int32_t>>();
       },
       "allowed_token_ids"},
      {[](SamplingParams& p) {
         p.allowed_token_ids =
             std::make_shared<const std::vector<int32_t>>(std::vector<int32_t>{3, 100});
       },
       "allowed_token_ids"},
      {[](SamplingParams& p) {
         p.bad_words_token_ids = {{5, -1}};
       },
       "bad_words"},
      {[](SamplingParams& p) { p.bad_words_token_ids = {{}}; }, "bad_words"},
  };
  EXPECT_TRUE(SamplingParams{}.Validate(100).ok());
  for (const auto& c : cases) {
    SamplingParams p;
    c.set(p);
    Status st = p.Validate(100);
    EXPECT_FALSE(st.ok()) << c.field;
    EXPECT_NE(st.message().find(c.field), std::string::npos) << st.message();
  }
}

// Every mode × every kind of broken row: an error naming the step, never a token read out of
// bounds (keep = 0 read order_[-1] before).
TEST(Sampler, NonFiniteLogitsAreAnErrorNamingTheStep) {
  const float nan = std::nanf("");
  const std::vector<std::pair<std::vector<float>, std::string>> rows = {
      {{nan, nan, nan, nan}, "logit of token 0 is NaN"},
      {{1.0f, nan, 2.0f, 0.0f}, "logit of token 1 is NaN"},
      {{1.0f, 2.0f, INFINITY, 0.0f}, "logit of token 2 is +inf"},
      {{-INFINITY, -INFINITY, -INFINITY, -INFINITY}, "every logit is -inf"},
  };
  for (float temperature : {0.0f, 1.0f}) {
    for (int top_k : {0, 2}) {
      for (float top_p : {1.0f, 0.5f}) {
        for (float min_p : {0.0f, 0.5f}) {
          SamplingParams p;
          p.temperature = temperature;
          p.top_k = top_k;
          p.top_p = top_p;
          p.min_p = min_p;
          p.logprobs = 2;
          p.repetition_penalty = 1.5f;
          p.seed = 1;
          for (const auto& [row, fragment] : rows) {
            Sampler s(p, {0});
            std::vector<float> ok_row = {0.5f, 1.0f, 0.25f, 0.0f};
            TokenLogprob chosen{};
            std::vector<TokenLogprob> top;
            ASSERT_TRUE(s.Sample(ok_row.data(), 4, &chosen, &top).ok());
            std::vector<float> work = row;
            auto t = s.Sample(work.data(), 4, &chosen, &top);
            ASSERT_FALSE(t.ok());
            EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
            EXPECT_NE(t.status().message().find("sampling step 1"), std::string::npos)
                << t.status().message();
            EXPECT_NE(t.status().message().find(fragment), std::string::npos)
                << t.status().message();
          }
        }
      }
    }
  }
}

// A non-finite logit is an error also when a constraint masks its token (review finding: the
// masked row passed the check, and the log-probs, taken from the raw row, came back as -9999).
TEST(Sampler, NonFiniteLogitsUnderAMaskAreAnError) {
  const float nan = std::nanf("");
  for (float bad : {nan, INFINITY}) {
    for (int constraint = 0; constraint < 3; ++constraint) {
      SamplingParams p;
      p.temperature = 0;
      p.logprobs = 2;
      if (constraint == 0) p.allowed_token_ids = std::make_shared<std::vector<int32_t>>(std::vector<int32_t>{0, 1});
      if (constraint == 1) p.bad_words_token_ids = {{3}};
      if (constraint == 2) p.min_tokens = 1;  // token 3 stands for EOS below
      Sampler s(p, {0}, /*stop_tokens=*/{3});
      std::vector<float> row = {0.5f, 1.0f, 0.25f, bad};
      TokenLogprob chosen{};
      std::vector<TokenLogprob> top;
      auto t = s.Sample(row.data(), 4, &chosen, &top);
      ASSERT_FALSE(t.ok()) << "constraint " << constraint << " token " << *t;
      EXPECT_NE(t.status().message().find("logit of token 3 is"), std::string::npos)
          << t.status().message();
    }
  }
}

TEST(Sampler, PartlyMaskedRowsSampleOnlyFiniteTokensAndLogprobsStayFinite) {
  for (float temperature : {0.0f, 1e-4f, 1.0f}) {
    SamplingParams p;
    p.temperature = temperature;
    p.logprobs = 4;
    p.seed = 3;
    p.top_p = 0.9f;
    Sampler s(p, {});
    for (int i = 0; i < 50; ++i) {
      std::vector<float> row = {-INFINITY, 3e38f, -INFINITY, -3e38f};
      TokenLogprob chosen{};
      std::vector<TokenLogprob> top;
      auto t = s.Sample(row.data(), 4, &chosen, &top);
      ASSERT_TRUE(t.ok()) << t.status().ToString();
      EXPECT_EQ(*t, 1);
      for (const auto& e : top) EXPECT_TRUE(std::isfinite(e.logprob));
    }
  }
}

TEST(Sampler, EmptyRowIsAnError) {
  SamplingParams p;
  Sampler s(p, {});
  float x = 0;
  auto t = s.Sample(&x, 0, nullptr, nullptr);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("empty logits row"), std::string::npos);
}


// A 3000-token row (47 draw blocks) under each filter, against a reference built independently:
// softmax(l / T) in double, tokens below min_p × the top probability dropped (vLLM V1 applies
// min-p before top-k/p), the rest sorted by (probability desc, token asc), then top-k, then the
// smallest prefix holding top_p of the survivors' mass. Every draw must be in the reference's
// set and the most likely tokens' frequencies its renormalised probabilities.
// The configurations reach the one-pass top-k (k ≤ 64) and the partial_sort (k = 300), top-p
// held by the top 64 and not (T = 3 flattens the row), min-p alone, and plain temperature.
TEST(Sampler, LargeVocabularyDrawsFollowTheReferenceFilters) {
  const int vocab = 3000;
  auto l = Logits(vocab, 11);
  std::vector<float> sorted = l;
  std::sort(sorted.begin(), sorted.end(), std::greater<float>());
  // 40 tokens tied at the 20th largest logit and 40 at the 150th: top_k = 30 and 170 cut
  // through them, and every tied token stays (vLLM masks only the logits below the k-th)
  for (int i = 100; i < 140; ++i) l[static_cast<size_t>(i)] = sorted[19];
  std::vector<float> rest;  // the 151st largest of the others: 150 tokens above the second tie
  for (int i = 0; i < vocab; ++i) {
    if (i < 1000 || i >= 1040) rest.push_back(l[static_cast<size_t>(i)]);
  }
  std::nth_element(rest.begin(), rest.begin() + 150, rest.end(), std::greater<float>());
  for (int i = 1000; i < 1040; ++i) l[static_cast<size_t>(i)] = rest[150];
  l[42] = -INFINITY;                                                  // a masked token
  struct Cfg {
    float t;
    int k;
    float top_p, min_p;
  };
  const Cfg cfgs[] = {{1.0f, 0, 1.0f, 0},
                      {0.8f, 30, 1.0f, 0},
                      {1.0f, 300, 1.0f, 0},
                      {1.0f, 0, 0.9f, 0},
                      {3.0f, 0, 0.9f, 0},
                      {1.0f, 40, 0.8f, 0},
                      {1.0f, 0, 1.0f, 0.05f},
                      {3.0f, 300, 0.95f, 0.2f},
                      // min-p then top-p keeps fewer than top-p then min-p (the V0 order)
                      {1.0f, 0, 0.5f, 0.3f},
                      {2.0f, 50, 0.6f, 0.5f},
                      // past the one-pass top-k (k > 64): the k-th found by bucket counts
                      {1.0f, 170, 1.0f, 0},
                      {100.0f, 170, 0.9f, 0},
                      {100.0f, 0, 0.999f, 0}};
  for (const Cfg& c : cfgs) {
    SCOPED_TRACE("T " + std::to_string(c.t) + " top_k " + std::to_string(c.k) + " top_p " +
                 std::to_string(c.top_p) + " min_p " + std::to_string(c.min_p));
    std::vector<double> prob(vocab);
    double mx = -INFINITY;
    for (float x : l) mx = std::max(mx, double(x) / c.t);
    for (int i = 0; i < vocab; ++i) prob[i] = std::exp(double(l[i]) / c.t - mx);
    std::vector<int> order;
    for (int i = 0; i < vocab; ++i) {
      if (prob[i] >= c.min_p && prob[i] > 0) order.push_back(i);
    }
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return prob[a] > prob[b]; });
    size_t keep = c.k > 0 ? std::min(static_cast<size_t>(c.k), order.size()) : order.size();
    if (c.k == 30 || c.k == 170) {
      ASSERT_EQ(prob[order[keep]], prob[order[keep - 1]]) << "the k-th should be tied";
    }
    while (keep > 0 && keep < order.size() && prob[order[keep]] == prob[order[keep - 1]]) ++keep;
    double total = 0;
    for (size_t i = 0; i < keep; ++i) total += prob[order[i]];
    if (c.top_p < 1) {
      double cum = 0;
      size_t n = 0;
      while (n < keep && cum < c.top_p * total) cum += prob[order[n++]];
      keep = n;
    }
    std::vector<double> want(vocab, 0.0);
    double mass = 0;
    for (size_t i = 0; i < keep; ++i) mass += (want[order[i]] = prob[order[i]]);
    if (c.top_p < 1 && c.t >= 3.0f) {
      ASSERT_GT(keep, 64u);  // past the one-pass first attempt
    }
    SamplingParams p;
    p.temperature = c.t;
    p.top_k = c.k;
    p.top_p = c.top_p;
    p.min_p = c.min_p;
    p.seed = 5;
    Sampler s(p, {});
    std::vector<int> counts(vocab, 0);
    const int draws = 4000;  // fixed seed: the same draws every run
    for (int d = 0; d < draws; ++d) {
      const int32_t t = Draw(p, l, &s);
      ASSERT_TRUE(t >= 0 && t < vocab);
      ASSERT_GT(want[t], 0.0) << "token " << t << " is outside the reference's set";
      ++counts[t];
    }
    for (size_t i = 0; i < std::min<size_t>(keep, 5); ++i) {
      const int t = order[i];
      if (want[t] == 0) continue;
      EXPECT_NEAR(counts[t] / double(draws), want[t] / mass, 0.025) << "token " << t;  // ≥ 3σ
    }
    if ((c.k == 30 || c.k == 170) && c.top_p >= 1) {  // ties past the k-th are drawn too
      const int first = c.k == 30 ? 100 : 1000;
      double share = 0, drawn = 0;
      for (int i = first + 30; i < first + 40; ++i) {
        share += want[i] / mass;
        drawn += counts[i] / double(draws);
      }
      EXPECT_NEAR(drawn, share, 0.03);
      EXPECT_GT(drawn, 0.0);
    }
  }
}

}  // namespace
}  // namespace loom
