// GET /load's server_load: a generation request counts while any copy of its hold lives — the
// handler's, then its GenerationState's (kept by the reply or stream and the engine callbacks).
#include <gtest/gtest.h>

#include <memory>

#include "server/generation_state.h"
#include "server/server_context.h"

namespace loom::server {
namespace {

TEST(ServerLoad, ARequestCountsUntilItsLastHoldGoes) {
  ServerContext ctx;
  EXPECT_EQ(ctx.server_load.load(), 0);
  std::shared_ptr<const void> a = HoldServerLoad(ctx);
  std::shared_ptr<const void> b = HoldServerLoad(ctx);
  EXPECT_EQ(ctx.server_load.load(), 2);
  {
    auto state = std::make_shared<GenerationState>();
    state->load_hold = std::move(a);  // the handler hands its hold to the request's state
    std::shared_ptr<GenerationState> callback_copy = state;
    state.reset();  // the reply is written; a sequence's callback still holds the state
    EXPECT_EQ(ctx.server_load.load(), 2);
  }
  EXPECT_EQ(ctx.server_load.load(), 1);  // the last sequence ended
  std::shared_ptr<const void> copy = b;
  b.reset();
  EXPECT_EQ(ctx.server_load.load(), 1);
  copy.reset();
  EXPECT_EQ(ctx.server_load.load(), 0);
}

}  // namespace
}  // namespace loom::server
