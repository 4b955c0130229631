// AsyncEngine: the engine thread survives whatever a round throws, and a request after it runs.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <memory>

#include "engine/async_engine.h"
#include "model/model.h"

namespace loom {
namespace {

GenerationRequest Greedy(std::vector<int32_t> prompt, int max_tokens) {
  GenerationRequest r;
  r.prompt = std::move(prompt);
  r.params.temperature = 0;
  r.params.max_tokens = max_tokens;
  return r;
}

// Submits a greedy request and waits (at most 60 s) for its last update's finish reason.
FinishReason RunOne(AsyncEngine& engine, std::vector<int32_t> prompt) {
  auto done = std::make_shared<std::promise<FinishReason>>();
  std::future<FinishReason> got = done->get_future();
  auto id = engine.Submit(Greedy(std::move(prompt), 4), [done](SequenceUpdate&& u) {
    if (u.finish_reason != FinishReason::kNone) done->set_value(u.finish_reason);
  });
  EXPECT_TRUE(id.ok()) << id.status().ToString();
  if (!id.ok()) return FinishReason::kNone;
  if (got.wait_for(std::chrono::seconds(60)) != std::future_status::ready) {
    ADD_FAILURE() << "no last update within 60 s";
    return FinishReason::kNone;
  }
  return got.get();
}

// An exception of no standard type thrown on the engine thread (here by the finished-sequences
// hook the server uses to trim the adapter store) ended the process through std::terminate:
// only std::exception was caught there. Now it is logged and the next request is served.
TEST(AsyncEngine, AHookThatThrowsAnythingLeavesTheEngineServing) {
  auto model = Model::Load(std::string(LOOM_FIXTURES) + "/models/llama_f32");
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  std::atomic<int> hooks{0};
  EngineOptions options;
  options.on_sequences_finished = [&hooks] {
    if (hooks.fetch_add(1) == 0) throw 42;  // the first time only
  };
  AsyncEngine engine(model->get(), options, nullptr);
  EXPECT_EQ(RunOne(engine, {1, 2, 3}), FinishReason::kLength);  // delivered before the hook
  EXPECT_EQ(RunOne(engine, {4, 5, 6}), FinishReason::kLength);
  engine.Stop();  // the hook runs after the last update is delivered: wait for it
  EXPECT_EQ(hooks.load(), 2);
  EXPECT_EQ(engine.num_in_flight(), 0);
}

// One client's callback that throws anything (not only a std::exception) must not end the
// others: before, a non-std exception left the round and aborted every sequence in flight.
TEST(AsyncEngine, ACallbackThatThrowsAnythingEndsNoOtherSequence) {
  auto model = Model::Load(std::string(LOOM_FIXTURES) + "/models/llama_f32");
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  AsyncEngine engine(model->get(), EngineOptions{}, nullptr);
  std::atomic<int> thrown{0};
  auto bad = engine.Submit(Greedy({7, 8, 9}, 64), [&thrown](SequenceUpdate&&) {
    thrown.fetch_add(1);
    throw 7;
  });
  ASSERT_TRUE(bad.ok());
  EXPECT_EQ(RunOne(engine, {4, 5, 6}), FinishReason::kLength);  // 4 tokens, beside the other
  engine.Stop();
  EXPECT_GT(thrown.load(), 1);  // its updates kept coming after the first throw
  EXPECT_EQ(engine.num_in_flight(), 0);
}

}  // namespace
}  // namespace loom
