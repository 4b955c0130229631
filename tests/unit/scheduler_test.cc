// Scheduler: max_loras admission, starvation-freedom, preemption + resume giving the same tokens,
// prefix-cache hits only within one adapter identity, abort freeing blocks, the prefill cap
// while rows decode.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <set>

#include "engine/engine.h"
#include "lora/adapter.h"
#include "ops/matmul.h"

namespace loom {
namespace {

const std::string kModels = std::string(LOOM_FIXTURES) + "/models/";
const std::string kAdapters = std::string(LOOM_FIXTURES) + "/adapters/";

struct Fixture {
  std::unique_ptr<Model> model;
  std::vector<std::shared_ptr<const Adapter>> adapters;  // 3 llama adapters
};

Fixture& Llama() {
  static Fixture* f = [] {
    auto* fx = new Fixture;
    auto m = Model::Load(kModels + "llama_f32");
    EXPECT_TRUE(m.ok()) << m.status().ToString();
    fx->model = std::move(m).value();
    for (const char* name : {"llama_qv_r8_f32", "llama_mlp_r6", "llama_all_r4_f16"}) {
      auto a = LoadAdapter(name, kAdapters + name, fx->model->sites(), 0);
      EXPECT_TRUE(a.ok()) << a.status().ToString();
      fx->adapters.push_back(*a);
    }
    return fx;
  }();
  return *f;
}

GenerationRequest Greedy(std::vector<int32_t> prompt, int max_tokens,
                         std::shared_ptr<const Adapter> adapter = nullptr) {
  GenerationRequest r;
  r.prompt = std::move(prompt);
  r.params.temperature = 0;
  r.params.max_tokens = max_tokens;
  r.params.ignore_eos = true;
  r.params.logprobs = 2;
  r.adapter = std::move(adapter);
  return r;
}

std::vector<int32_t> Prompt(int seed, int len) {
  std::vector<int32_t> p;
  for (int i = 0; i < len; ++i) p.push_back(3 + (seed * 37 + i * 11) % 250);
  return p;
}

// The same request alone, in a fresh engine.
GenerationResult Alone(const GenerationRequest& r, KvDtype kv = KvDtype::kF32) {
  EngineOptions o;
  o.kv_cache_dtype = kv;
  Engine e(Llama().model.get(), o);
  EXPECT_TRUE(e.Add(r).ok());
  return e.RunToCompletion().at(0);
}

// Each result (by id = index into `reqs`) equals its request run alone: tokens and log-probs,
// bitwise.
void ExpectEachEqualsAlone(const std::vector<GenerationResult>& results,
                           const std::vector<GenerationRequest>& reqs, KvDtype kv = KvDtype::kF32) {
  for (const auto& r : results) {
    const GenerationResult alone = Alone(reqs[static_cast<size_t>(r.id)], kv);
    EXPECT_EQ(r.generated, alone.generated) << "request " << r.id;
    ASSERT_EQ(r.logprobs.size(), alone.logprobs.size());
    for (size_t t = 0; t < r.logprobs.size(); ++t) {
      EXPECT_EQ(r.logprobs[t].logprob, alone.logprobs[t].logprob) << r.id << " step " << t;
    }
  }
}

TEST(Scheduler, MaxLorasBoundsDistinctAdaptersPerStep) {
  Fixture& f = Llama();
  EngineOptions o;
  o.max_loras = 2;
  Engine engine(f.model.get(), o);
  std::vector<GenerationRequest> reqs;
  for (int i = 0; i < 9; ++i) {
    reqs.push_back(Greedy(Prompt(i, 5 + i), 6, f.adapters[static_cast<size_t>(i) % 3]));
    ASSERT_TRUE(engine.Add(reqs.back()).ok());
  }
  size_t max_seen = 0;
  while (engine.HasWork()) {
    std::set<const Adapter*> running;
    for (const auto& s : engine.scheduler().running()) running.insert(s->request.adapter.get());
    max_seen = std::max(max_seen, running.size());
    ASSERT_LE(running.size(), 2u);
    engine.Step();
  }
  EXPECT_EQ(max_seen, 2u);  // the bound was reached, not just respected trivially
  auto results = engine.TakeFinished();
  ASSERT_EQ(results.size(), 9u);
  for (const auto& r : results) {
    EXPECT_EQ(r.generated, Alone(reqs[static_cast<size_t>(r.id)]).generated) << "request " << r.id;
  }
}

// A request whose adapter cannot join waits only a bounded number of steps, even while
// requests for running adapters keep arriving.
TEST(Scheduler, NoStarvationUnderMaxLoras) {
  Fixture& f = Llama();
  EngineOptions o;
  o.max_loras = 1;
  Engine engine(f.model.get(), o);
  ASSERT_TRUE(engine.Add(Greedy(Prompt(0, 4), 4, f.adapters[0])).ok());
  engine.Step();
  const int64_t starving = *engine.Add(Greedy(Prompt(1, 4), 4, f.adapters[1]));
  int steps = 0;
  bool done = false;
  while (!done && steps < 500) {
    // Keep feeding adapter 0 so its set never drains on its own.
    if (steps % 2 == 0) {
      ASSERT_TRUE(engine.Add(Greedy(Prompt(steps, 4), 4, f.adapters[0])).ok());
    }
    engine.Step();
    ++steps;
    for (const auto& r : engine.TakeFinished()) done |= r.id == starving;
  }
  EXPECT_TRUE(done) << "request for a second adapter never ran under max_loras=1";
  EXPECT_LT(steps, 200);
}

// Batch-invariant kernels for the duration of a test.
struct BatchInvariant {
  BatchInvariant() { GlobalMatmulOptions().batch_invariant = true; }
  ~BatchInvariant() { GlobalMatmulOptions().batch_invariant = false; }
};

// A cache too small for all sequences at once: sequences are preempted and recomputed, and
// every output (tokens and log-probs, bitwise) equals the same request alone.
// Over a bf16 cache too: the recomputed K/V round to the same bf16 values.
TEST(Scheduler, PreemptionAndResumeGiveTheSameTokens) {
  BatchInvariant invariant;
  Fixture& f = Llama();
  for (KvDtype kv : {KvDtype::kF32, KvDtype::kBf16}) {
    EngineOptions o;
    o.kv_cache_tokens = 96;  // 6 blocks; 4 sequences of 20 + 30 tokens need 16 blocks
    o.enable_prefix_caching = false;
    o.kv_cache_dtype = kv;
    Engine engine(f.model.get(), o);
    std::vector<GenerationRequest> reqs;
    for (int i = 0; i < 4; ++i) {
      reqs.push_back(
          Greedy(Prompt(i, 20), 30, i == 0 ? nullptr : f.adapters[static_cast<size_t>(i) - 1]));
      ASSERT_TRUE(engine.Add(reqs.back()).ok());
    }
    auto results = engine.RunToCompletion();
    EXPECT_GT(engine.scheduler().num_preemptions(), 0) << KvDtypeName(kv);
    ASSERT_EQ(results.size(), 4u);
    ExpectEachEqualsAlone(results, reqs, kv);
    EXPECT_EQ(engine.kv_cache().num_free_blocks(), engine.kv_cache().num_blocks());
    EXPECT_EQ(engine.kv_cache().dtype(), kv);
  }
}

// The prefix-cache counters count each request's prompt once, as vLLM's: a preempted
// sequence's readmission (its generated tokens, its own blocks) is not a query or a hit.
TEST(Scheduler, PrefixCounterCountsPromptsOnceThroughPreemption) {
  BatchInvariant invariant;
  Fixture& f = Llama();
  EngineOptions o;
  o.kv_cache_tokens = 96;
  Engine engine(f.model.get(), o);
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(engine.Add(Greedy(Prompt(i, 20), 30)).ok());
  auto results = engine.RunToCompletion();
  ASSERT_EQ(results.size(), 4u);
  EXPECT_GT(engine.scheduler().num_preemptions(), 0);
  EXPECT_EQ(engine.scheduler().prefix_queries(), 4 * 20);
  EXPECT_EQ(engine.scheduler().prefix_hits(), 0);  // four different prompts
}

// prompt_logprobs: each prompt token's log-prob, rank and top list are those of the log_softmax
// of the position before it (return_prompt_logits' rows, golden-tested against transformers),
// and bit-identical when the prompt is prefilled in 32-row chunks beside other requests with a
// cache small enough to preempt. A request for them computes every position: the same prompt's
// blocks, cached by an earlier request, are not used.
TEST(Scheduler, PromptLogprobsAreTheLogSoftmaxOfTheLogitsBefore) {
  BatchInvariant invariant;
  Fixture& f = Llama();
  const int vocab = f.model->config().vocab_size;
  const std::vector<int32_t> prompt = Prompt(7, 40);
  GenerationRequest logits_req = Greedy(prompt, 3, f.adapters[1]);
  logits_req.return_prompt_logits = true;
  const GenerationResult with_logits = Alone(logits_req);
  GenerationRequest req = Greedy(prompt, 3, f.adapters[1]);
  req.prompt_logprobs = 3;
  const GenerationResult alone = Alone(req);
  ASSERT_EQ(alone.prompt_logprobs.size(), prompt.size() - 1);
  ASSERT_EQ(alone.prompt_ranks.size(), prompt.size() - 1);
  ASSERT_EQ(alone.prompt_top_logprobs.size(), prompt.size() - 1);
  EXPECT_EQ(alone.generated, with_logits.generated);
  for (size_t i = 1; i < prompt.size(); ++i) {
    const float* row = with_logits.prompt_logits.data() + (i - 1) * static_cast<size_t>(vocab);
    double mx = row[0];
    for (int t = 0; t < vocab; ++t) mx = std::max(mx, double(row[t]));
    double z = 0;
    for (int t = 0; t < vocab; ++t) z += std::exp(double(row[t]) - mx);
    const double lse = mx + std::log(z);
    const int32_t tok = prompt[i];
    EXPECT_EQ(alone.prompt_logprobs[i - 1].token, tok);
    EXPECT_NEAR(alone.prompt_logprobs[i - 1].logprob, row[tok] - lse, 1e-5) << "position " << i;
    int above = 0;
    for (int t = 0; t < vocab; ++t) above += row[t] > row[tok];
    EXPECT_EQ(alone.prompt_ranks[i - 1], above + 1) << "position " << i;
    std::vector<int32_t> order(static_cast<size_t>(vocab));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](int32_t a, int32_t b) { return row[a] > row[b]; });
    const auto& top = alone.prompt_top_logprobs[i - 1];
    ASSERT_EQ(top.size(), 3u);
    for (size_t k = 0; k < 3; ++k) {
      EXPECT_EQ(top[k].token, order[k]) << "position " << i;
      EXPECT_NEAR(top[k].logprob, row[order[k]] - lse, 1e-5);
    }
  }
  // Mixed, chunked, preempted; the same prompt cached first by a request without them. It
  // arrives last (preemption takes the youngest) into a cache too small for all four.
  EngineOptions o;
  o.kv_cache_tokens = 160;
  o.max_batch_tokens = 8;
  Engine engine(f.model.get(), o);
  ASSERT_TRUE(engine.Add(Greedy(prompt, 2, f.adapters[1])).ok());
  engine.RunToCompletion();
  const int64_t hits_before = engine.scheduler().prefix_hits();
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(
        engine.Add(Greedy(Prompt(20 + i, 20), 40, f.adapters[static_cast<size_t>(i)])).ok());
  }
  const int64_t id = *engine.Add(req);
  std::vector<GenerationResult> results;
  bool preempted = false;
  while (engine.HasWork()) {
    engine.Step();
    for (const auto& w : engine.scheduler().waiting()) {
      preempted |= w->id == id && w->num_preemptions > 0;
    }
    for (auto& r : engine.TakeFinished()) results.push_back(std::move(r));
  }
  EXPECT_TRUE(preempted) << "the scoring request was never preempted";
  EXPECT_EQ(engine.scheduler().prefix_hits(), hits_before) << "the prompt came from the cache";
  auto mixed =
      std::find_if(results.begin(), results.end(), [&](const auto& r) { return r.id == id; });
  ASSERT_NE(mixed, results.end());
  EXPECT_EQ(mixed->generated, alone.generated);
  ASSERT_EQ(mixed->prompt_logprobs.size(), alone.prompt_logprobs.size());
  for (size_t i = 0; i < alone.prompt_logprobs.size(); ++i) {
    EXPECT_EQ(mixed->prompt_logprobs[i].logprob, alone.prompt_logprobs[i].logprob) << i;
    EXPECT_EQ(mixed->prompt_ranks[i], alone.prompt_ranks[i]) << i;
    ASSERT_EQ(mixed->prompt_top_logprobs[i].size(), 3u);
    for (size_t k = 0; k < 3; ++k) {
      EXPECT_EQ(mixed->prompt_top_logprobs[i][k].token, alone.prompt_top_logprobs[i][k].token);
      EXPECT_EQ(mixed->prompt_top_logprobs[i][k].logprob, alone.prompt_top_logprobs[i][k].logprob);
    }
  }
}

// A sequence with `prompt_len` prompt tokens for a bare scheduler.
std::unique_ptr<Sequence> Bare(int64_t id, int prompt_len) {
  auto seq = std::make_unique<Sequence>();
  seq->id = id;
  seq->tokens = Prompt(static_cast<int>(id), prompt_len);
  seq->request.prompt = seq->tokens;
  return seq;
}

int RowsOf(const StepPlan& plan, int64_t id) {
  for (const auto& [s, n] : plan.rows) {
    if (s->id == id) return n;
  }
  return 0;
}

// A bare scheduler whose sequence 0 (a `first_len`-token prompt, prefilled alone in one step)
// now decodes one row a step; Step() schedules, then computes the planned rows.
struct DecodingScheduler {
  std::unique_ptr<KvCache> cache;
  std::unique_ptr<Scheduler> sched;
  Sequence* decoding = nullptr;

  DecodingScheduler(int rows_while_decoding, int drain_steps, int first_len,
                    int max_num_seqs = 64) {
    cache = std::move(KvCache::Create(1, 1, 8, 256)).value();
    SchedulerOptions o;
    o.max_batch_tokens = 512;
    o.enable_prefix_caching = false;
    o.rows_while_decoding = rows_while_decoding;
    o.prefill_drain_steps = drain_steps;
    o.max_num_seqs = max_num_seqs;
    sched = std::make_unique<Scheduler>(cache.get(), o);
    sched->Enqueue(Bare(0, first_len));
    StepPlan first = Step();  // nothing decodes yet: the whole prompt, uncapped
    EXPECT_EQ(RowsOf(first, 0), first_len);
    decoding = first.rows.at(0).first;
  }
  StepPlan Step() {
    StepPlan plan = sched->Schedule();
    for (auto& [seq, n] : plan.rows) {
      seq->num_computed += n;
      if (seq->remaining() == 0) seq->tokens.push_back(5);  // its next token: a decode row
    }
    return plan;
  }
};

// While a row decodes, prefill rows are capped at max(min_prefill_chunk, rows_while_decoding -
// decode rows, backlog / prefill_drain_steps); with the cap off a prompt takes the whole budget.
TEST(Scheduler, PrefillIsCappedOnlyWhileRowsDecode) {
  DecodingScheduler d(40, 1000, 300);  // 1000: the backlog term out of the way
  d.sched->Enqueue(Bare(1, 300));
  StepPlan p1 = d.Step();
  EXPECT_EQ(RowsOf(p1, 0), 1);
  EXPECT_EQ(RowsOf(p1, 1), 39);  // 40 rows in all
  d.sched->set_rows_while_decoding(1);  // below the floor: prefill still moves 32 rows a step
  StepPlan p2 = d.Step();
  EXPECT_EQ(RowsOf(p2, 0), 1);
  EXPECT_EQ(RowsOf(p2, 1), 32);
  d.sched->set_rows_while_decoding(0);  // off: the rest of the prompt in one step
  StepPlan p3 = d.Step();
  EXPECT_EQ(RowsOf(p3, 0), 1);
  EXPECT_EQ(RowsOf(p3, 1), 300 - 39 - 32);
}

// A backlog of prompts drains within prefill_drain_steps steps even while rows decode.
TEST(Scheduler, PrefillBacklogDrainsWithinAFewSteps) {
  DecodingScheduler d(1, 4, 20);
  for (int i = 1; i <= 3; ++i) d.sched->Enqueue(Bare(i, 100));  // 300 prompt tokens waiting
  StepPlan p1 = d.Step();
  EXPECT_EQ(RowsOf(p1, 0), 1);
  EXPECT_EQ(RowsOf(p1, 1), 75);  // 300 / 4 rows, all from request 1; none of 2 yet
  EXPECT_EQ(RowsOf(p1, 2), 0);
  StepPlan p2 = d.Step();  // 225 left: 57 rows (25 of request 1, 32 of request 2)
  EXPECT_EQ(RowsOf(p2, 0), 1);
  EXPECT_EQ(RowsOf(p2, 1), 25);
  EXPECT_EQ(RowsOf(p2, 2), 32);
}

// target_step_ms far below any step's time: every prefill that overlaps decoding moves in
// chunks of max(32, a quarter of the backlog) rows. Outputs stay bitwise those of each request
// alone, and the prompts were really split (more steps than with the cap off).
TEST(Scheduler, SmallPrefillChunksWhileDecodingGiveTheSameTokens) {
  BatchInvariant invariant;
  Fixture& f = Llama();
  std::vector<GenerationRequest> reqs;
  for (int i = 0; i < 5; ++i) {
    reqs.push_back(Greedy(Prompt(i, 40 + 23 * i), 12, i == 0 ? nullptr : f.adapters[static_cast<size_t>(i) % 3]));
  }
  auto run = [&](double target_step_ms, std::vector<GenerationResult>* results) {
    EngineOptions o;
    o.target_step_ms = target_step_ms;
    o.enable_prefix_caching = false;
    Engine engine(f.model.get(), o);
    // Arrivals staggered so later prompts land while earlier sequences decode.
    for (size_t i = 0; i < reqs.size(); ++i) {
      EXPECT_TRUE(engine.Add(reqs[i]).ok());
      for (int k = 0; k < 3; ++k) engine.Step();
      for (auto& r : engine.TakeFinished()) results->push_back(std::move(r));
    }
    for (auto& r : engine.RunToCompletion()) results->push_back(std::move(r));
    if (target_step_ms > 0) {
      EXPECT_EQ(engine.scheduler().rows_while_decoding(), 1);  // the cap was in force
      EXPECT_GT(engine.ms_per_row(), 0);
    }
    return engine.steps();
  };
  std::vector<GenerationResult> capped, uncapped;
  const int64_t capped_steps = run(1e-6, &capped);
  const int64_t uncapped_steps = run(0, &uncapped);
  EXPECT_GT(capped_steps, uncapped_steps);
  ASSERT_EQ(capped.size(), reqs.size());
  ExpectEachEqualsAlone(capped, reqs);
}

// Waiting prompts beyond the free sequence slots do not count in the backlog.
TEST(Scheduler, PrefillBacklogCountsOnlyAdmissibleWaitingPrompts) {
  DecodingScheduler d(1, 4, 20, /*max_num_seqs=*/2);
  for (int i = 1; i <= 3; ++i) d.sched->Enqueue(Bare(i, 100));  // one slot free: 100 count
  StepPlan p1 = d.Step();
  EXPECT_EQ(RowsOf(p1, 0), 1);
  EXPECT_EQ(RowsOf(p1, 1), 32);  // max(32, 100 / 4), not 300 / 4
  EXPECT_EQ(RowsOf(p1, 2), 0);
}

TEST(Scheduler, PrefixCacheHitsOnlyWithinTheSameAdapterIdentity) {
  Fixture& f = Llama();
  Engine engine(f.model.get(), EngineOptions{});
  const std::vector<int32_t> shared = Prompt(7, 40);  // two full blocks + 8 tokens
  auto run = [&](std::shared_ptr<const Adapter> a) {
    auto id = engine.Add(Greedy(shared, 5, a));
    EXPECT_TRUE(id.ok());
    auto results = engine.RunToCompletion();
    return results.at(0);
  };
  const GenerationResult base1 = run(nullptr);
  EXPECT_EQ(base1.num_cached_prompt_tokens, 0);
  const GenerationResult base2 = run(nullptr);
  EXPECT_EQ(base2.num_cached_prompt_tokens, 32);  // both full blocks reused
  EXPECT_EQ(base2.generated, base1.generated);
  const GenerationResult a1 = run(f.adapters[0]);
  EXPECT_EQ(a1.num_cached_prompt_tokens, 0);  // another adapter never sees the base's blocks
  EXPECT_NE(a1.generated, base1.generated);
  const GenerationResult a2 = run(f.adapters[0]);
  EXPECT_EQ(a2.num_cached_prompt_tokens, 32);
  EXPECT_EQ(a2.generated, a1.generated);
  EXPECT_EQ(a2.generated, Alone(Greedy(shared, 5, f.adapters[0])).generated);
  // The same adapter folder loaded again is the same content: same identity, hits. A different
  // content under the same name is a new identity.
  auto reloaded = LoadAdapter("llama_qv_r8_f32", kAdapters + "llama_mlp_r6", f.model->sites(), 0);
  ASSERT_TRUE(reloaded.ok());
  const GenerationResult other = run(*reloaded);
  EXPECT_EQ(other.num_cached_prompt_tokens, 0);
  EXPECT_EQ(engine.scheduler().prefix_hits(), 64);
}

// vLLM's cache_salt: the salt is part of the first block's key (and so of every later one), so
// prompts with different salts, or a salt and none, never share blocks; the same salt does.
TEST(Scheduler, PrefixCacheHitsOnlyWithinTheSameCacheSalt) {
  Fixture& f = Llama();
  Engine engine(f.model.get(), EngineOptions{});
  const std::vector<int32_t> shared = Prompt(11, 40);  // two full blocks + 8 tokens
  auto run = [&](const std::string& salt, std::shared_ptr<const Adapter> a = nullptr) {
    GenerationRequest r = Greedy(shared, 5, std::move(a));
    r.cache_salt = salt;
    EXPECT_TRUE(engine.Add(r).ok());
    return engine.RunToCompletion().at(0);
  };
  const GenerationResult unsalted = run("");
  EXPECT_EQ(unsalted.num_cached_prompt_tokens, 0);
  const GenerationResult a1 = run("tenant-a");
  EXPECT_EQ(a1.num_cached_prompt_tokens, 0);  // the unsalted prompt's blocks are not its own
  EXPECT_EQ(engine.scheduler().prefix_hits(), 0);
  const GenerationResult a2 = run("tenant-a");
  EXPECT_EQ(a2.num_cached_prompt_tokens, 32);  // the same salt shares both full blocks
  EXPECT_EQ(engine.scheduler().prefix_hits(), 32);
  const GenerationResult b = run("tenant-b");
  EXPECT_EQ(b.num_cached_prompt_tokens, 0);
  const GenerationResult prefix_of_b = run("tenant-");  // no salt is a prefix of another
  EXPECT_EQ(prefix_of_b.num_cached_prompt_tokens, 0);
  const GenerationResult with_adapter = run("tenant-a", f.adapters[0]);
  EXPECT_EQ(with_adapter.num_cached_prompt_tokens, 0);  // the adapter's identity still counts
  const GenerationResult unsalted_again = run("");
  EXPECT_EQ(unsalted_again.num_cached_prompt_tokens, 32);
  EXPECT_EQ(engine.scheduler().prefix_hits(), 64);
  // The salt changes what is shared, never what is computed.
  for (const GenerationResult* r : {&a1, &a2, &b, &prefix_of_b, &unsalted_again}) {
    EXPECT_EQ(r->generated, unsalted.generated);
  }
}

TEST(Scheduler, APrefixKeyThatCollidesIsAMiss) {
  // Review finding: blocks were found by their 64-bit key alone, and the key was a public hash
  // whose collisions a client could compute (2^23 work): a prompt made to collide with another
  // prompt's first block had its KV served to that prompt. Keys are now keyed (SipHash under
  // the process's secret) and a hit needs the stored tokens to match as well.
  auto cache = std::move(KvCache::Create(1, 1, 8, 8)).value();
  std::vector<int32_t> owner;
  ASSERT_TRUE(cache->Reserve(&owner, kKvBlockSize));
  const std::vector<int32_t> victim = Prompt(3, kKvBlockSize), forged = Prompt(4, kKvBlockSize);
  ASSERT_NE(victim, forged);
  const uint64_t key = 0x1234567890abcdefull;
  cache->Publish(owner[0], key, forged.data());  // the forged block, under the victim's key
  std::vector<int32_t> table;
  EXPECT_EQ(cache->MatchPrefix({key}, victim.data(), &table), 0);
  EXPECT_TRUE(table.empty());
  EXPECT_EQ(cache->MatchPrefix({key}, forged.data(), &table), 1);  // its own tokens: a hit
  EXPECT_EQ(table, owner);
  cache->Release(&table);
  cache->Release(&owner);
}

TEST(Scheduler, AbortFreesBlocksAndEmitsAnUpdate) {
  Fixture& f = Llama();
  Engine engine(f.model.get(), EngineOptions{});
  engine.set_emit_updates(true);
  const int64_t a = *engine.Add(Greedy(Prompt(1, 30), 100));
  const int64_t b = *engine.Add(Greedy(Prompt(2, 30), 5));
  engine.Step();
  engine.Step();
  EXPECT_TRUE(engine.Abort(a));
  EXPECT_FALSE(engine.Abort(a));
  auto updates = engine.TakeUpdates();
  ASSERT_FALSE(updates.empty());
  EXPECT_EQ(updates.back().id, a);
  EXPECT_EQ(updates.back().finish_reason, FinishReason::kAbort);
  engine.RunToCompletion();
  EXPECT_EQ(engine.kv_cache().num_free_blocks(), engine.kv_cache().num_blocks());
  (void)b;
}

// A bare scheduler's sequence: a `prompt_len`-token prompt.
std::unique_ptr<Sequence> Seq(int64_t id, int prompt_len, int max_tokens, uint64_t adapter = 0,
                              int prompt_logprobs = -1) {
  auto q = std::make_unique<Sequence>();
  q->id = id;
  q->request.prompt.assign(static_cast<size_t>(prompt_len), static_cast<int32_t>(5 + id));
  q->tokens = q->request.prompt;
  q->request.params.max_tokens = max_tokens;
  q->request.prompt_logprobs = prompt_logprobs;
  q->adapter_key = adapter;
  return q;
}

// One simulated step: every planned row computed; a sequence that completes its tokens takes a
// token, and the ones that reach max_tokens are retired. The ids retired.
std::vector<int64_t> RunStep(Scheduler* s, const StepPlan& p) {
  std::vector<Sequence*> done;
  for (auto& [q, n] : p.rows) {
    q->num_computed += n;
    if (q->remaining() == 0) {
      q->tokens.push_back(7);
      q->result.generated.push_back(7);
      if (static_cast<int>(q->result.generated.size()) >= q->request.params.max_tokens) {
        done.push_back(q);
      }
    }
  }
  std::vector<int64_t> ids;
  for (Sequence* q : done) ids.push_back(s->Retire(q)->id);
  return ids;
}

// The running list stays in arrival order when a request passes a head blocked by max_loras
// and when a preempted sequence comes back, so preemption takes the youngest (review finding:
// an older sequence was preempted, and lost its whole prefix, while a younger one ran on).
TEST(Scheduler, RunningStaysInArrivalOrderSoPreemptionTakesTheYoungest) {
  auto kv = KvCache::Create(1, 1, 8, 12);
  ASSERT_TRUE(kv.ok());
  SchedulerOptions o;
  o.max_batch_tokens = 16;
  o.max_loras = 2;
  o.enable_prefix_caching = false;
  Scheduler s(kv->get(), o);
  s.Enqueue(Seq(0, 8, 10, 33));
  s.Enqueue(Seq(1, 8, 10, 11));
  s.Enqueue(Seq(2, 8, 100, 22));  // blocked behind max_loras 2 while 33 and 11 run
  s.Enqueue(Seq(3, 8, 100, 11));  // passes it (its adapter is running)
  int preemptions = 0;
  for (int step = 0; step < 2000 && s.HasWork(); ++step) {
    StepPlan p = s.Schedule();
    preemptions += static_cast<int>(p.preempted.size());
    const auto& running = s.running();
    for (size_t i = 1; i < running.size(); ++i) {
      ASSERT_LT(running[i - 1]->arrival, running[i]->arrival) << "step " << step;
    }
    RunStep(&s, p);
  }
  EXPECT_FALSE(s.HasWork());
  EXPECT_GT(preemptions, 0);  // the cache was too small: the order mattered
}

// A sequence still scoring its prompt gets at most max_prompt_logprob_rows rows a step (each
// needs a whole-vocabulary logits row: 512 of 152k took 311 MB); one that does not is unaffected.
TEST(Scheduler, PromptScoringChunksAreCapped) {
  auto kv = KvCache::Create(1, 1, 8, 64);
  ASSERT_TRUE(kv.ok());
  SchedulerOptions o;
  o.max_batch_tokens = 512;
  o.max_prompt_logprob_rows = 8;
  Scheduler s(kv->get(), o);
  s.Enqueue(Seq(0, 40, 4, 0, /*prompt_logprobs=*/2));
  s.Enqueue(Seq(1, 40, 4));
  StepPlan p = s.Schedule();
  ASSERT_EQ(p.rows.size(), 2u);
  EXPECT_EQ(p.rows[0].second, 8);
  EXPECT_EQ(p.rows[1].second, 40);
}

// An old prompt still prefilling in small chunks (prompt scoring caps them) among younger
// sequences that decode, with short requests arriving all the time: it finishes. Review
// finding: decode rows were planned first and never preempted, so when the old prompt's chunk
// needed a block it preempted itself, lost its KV, and was readmitted only to lose it again.
// The youngest sequences are preempted now, rows given or not (as vLLM's scheduler does).
TEST(Scheduler, AnOldPromptStillPrefillingIsNotStarvedByYoungerDecodingOnes) {
  auto kv = KvCache::Create(1, 1, 8, 12);
  ASSERT_TRUE(kv.ok());
  SchedulerOptions o;
  o.max_batch_tokens = 64;
  o.max_prompt_logprob_rows = 16;
  o.enable_prefix_caching = false;
  Scheduler s(kv->get(), o);
  s.Enqueue(Seq(0, 150, 2, 0, /*prompt_logprobs=*/0));
  int64_t next = 1;
  int finished_at = -1, preemptions = 0;
  for (int step = 0; step < 400 && finished_at < 0; ++step) {
    while (s.waiting().size() < 8) s.Enqueue(Seq(next++, 8, 100));
    StepPlan p = s.Schedule();
    for (Sequence* q : p.preempted) {
      ++preemptions;
      EXPECT_TRUE(std::none_of(p.rows.begin(), p.rows.end(),
                               [&](const auto& r) { return r.first == q; }))
          << "a preempted sequence kept its rows, step " << step;
    }
    for (int64_t id : RunStep(&s, p)) {
      if (id == 0) finished_at = step;
    }
  }
  EXPECT_GE(finished_at, 0) << "the 150-token prompt never finished";
  EXPECT_GT(preemptions, 0);  // the cache was too small: younger sequences gave way
}

// The prompt-scoring cap is per step, all sequences together (review finding: each scoring
// sequence got max_prompt_logprob_rows, so 64 prompts with echo + logprobs made a step of
// max_batch_tokens whole-vocabulary logits rows — 10 GB at 16384 rows and a 152k vocabulary).
TEST(Scheduler, PromptScoringRowsAreCappedPerStep) {
  auto kv = KvCache::Create(1, 1, 8, 256);
  ASSERT_TRUE(kv.ok());
  SchedulerOptions o;
  o.max_batch_tokens = 512;
  o.max_prompt_logprob_rows = 20;
  Scheduler s(kv->get(), o);
  for (int i = 0; i < 6; ++i) s.Enqueue(Seq(i, 40, 2, 0, /*prompt_logprobs=*/1));
  s.Enqueue(Seq(6, 40, 2));  // not scoring: not capped
  int scored_total = 0;
  for (int step = 0; step < 100 && s.HasWork(); ++step) {
    StepPlan p = s.Schedule();
    int scoring = 0;
    for (auto& [q, n] : p.rows) {
      const int end = static_cast<int>(q->request.prompt.size()) - 1;
      if (q->request.prompt_logprobs >= 0) {
        scoring += std::max(0, std::min(q->num_computed + n, end) - q->num_computed);
      }
    }
    EXPECT_LE(scoring, 20) << "step " << step;
    scored_total += scoring;
    RunStep(&s, p);
  }
  EXPECT_FALSE(s.HasWork());
  EXPECT_EQ(scored_total, 6 * 39);
}

}  // namespace
}  // namespace loom
