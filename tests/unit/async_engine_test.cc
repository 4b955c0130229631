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

// An exception of no standard type thrown in a round (here by the finished-sequences hook the
// server uses to trim the adapter store) ended the process through std::terminate: the round
// caught std::exception only, and nothing caught it on the engine thread. Now the round's
// sequences are aborted and the next request is served.
TEST(AsyncEngine, ARoundThatThrowsAnythingLeavesTheEngineServing) {
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
  EXPECT_EQ(hooks.load(), 2);
  EXPECT_EQ(engine.num_in_flight(), 0);
}

}  // namespace
}  // namespace loom
