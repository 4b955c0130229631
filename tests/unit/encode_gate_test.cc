// EncodeGate: one large text tokenized at a time, a bounded number waiting, small texts never.
#include "server/encode_gate.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

namespace loom::server {
namespace {

TEST(EncodeGate, OneLargeAtATimeAFewWaitTheRestAreRefused) {
  EncodeGate gate(/*large_bytes=*/100, /*max_waiting=*/3);
  std::atomic<int> inside{0};
  std::atomic<int> most_inside{0};
  std::atomic<int> done{0};
  std::vector<std::thread> waiters;
  {
    const EncodeGate::Pass held = gate.Enter(100);
    ASSERT_TRUE(held.ok());
    // Three large texts wait for the one being tokenized.
    for (int i = 0; i < 3; ++i) {
      waiters.emplace_back([&] {
        const EncodeGate::Pass p = gate.Enter(1000);
        EXPECT_TRUE(p.ok());
        const int now = ++inside;
        int seen = most_inside.load();
        while (now > seen && !most_inside.compare_exchange_weak(seen, now)) {
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
        --inside;
        ++done;
      });
    }
    while (gate.waiting() < 3) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    // A fourth is refused at once; a small text passes without waiting.
    EXPECT_FALSE(gate.Enter(5000).ok());
    EXPECT_TRUE(gate.Enter(99).ok());
    EXPECT_EQ(done.load(), 0);
  }
  for (std::thread& t : waiters) t.join();
  EXPECT_EQ(done.load(), 3);
  EXPECT_EQ(most_inside.load(), 1);  // never two large texts at once
  EXPECT_EQ(gate.waiting(), 0);
  // Free again: a large text passes, and a refused pass released nothing it did not hold.
  EXPECT_TRUE(gate.Enter(100).ok());
  EXPECT_TRUE(gate.Enter(100).ok());
}

}  // namespace
}  // namespace loom::server
