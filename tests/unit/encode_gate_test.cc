// EncodeGate: one large text tokenized at a time, a bounded number waiting, small texts never.
#include "server/encode_gate.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

namespace loom::server {
namespace {

// Waits (at most 10 s) until `n` large texts wait at the gate.
void WaitUntilWaiting(EncodeGate& gate, int n) {
  for (int i = 0; gate.waiting() < n; ++i) {
    ASSERT_LT(i, 10000) << "the large texts did not wait for the one being tokenized";
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

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
    ASSERT_NO_FATAL_FAILURE(WaitUntilWaiting(gate, 3));
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

TEST(EncodeGate, CloseRefusesTheWaitingAndLaterLargeTextsNotTheHolder) {
  EncodeGate gate(/*large_bytes=*/100, /*max_waiting=*/3);
  std::atomic<int> refused_closed{0};
  std::vector<std::thread> waiters;
  const EncodeGate::Pass held = gate.Enter(100);
  ASSERT_TRUE(held.ok());
  for (int i = 0; i < 2; ++i) {
    waiters.emplace_back([&] {
      const EncodeGate::Pass p = gate.Enter(1000);
      if (!p.ok() && p.closed()) ++refused_closed;
    });
  }
  ASSERT_NO_FATAL_FAILURE(WaitUntilWaiting(gate, 2));
  gate.Close();
  for (std::thread& t : waiters) t.join();
  EXPECT_EQ(refused_closed.load(), 2);  // woken and refused, though the holder still holds it
  EXPECT_TRUE(held.ok());
  const EncodeGate::Pass later = gate.Enter(100);
  EXPECT_FALSE(later.ok());
  EXPECT_TRUE(later.closed());
  EXPECT_TRUE(gate.Enter(99).ok());  // small texts never wait, closed or not
}

TEST(EncodeGate, FewHandlerThreadsFewWaiting) {
  EncodeGate gate(/*large_bytes=*/100);
  gate.SetHandlerThreads(4);  // a quarter of 4 threads hold it: the one tokenizing, none waiting
  const EncodeGate::Pass held = gate.Enter(100);
  ASSERT_TRUE(held.ok());
  const EncodeGate::Pass refused = gate.Enter(100);
  EXPECT_FALSE(refused.ok());
  EXPECT_FALSE(refused.closed());
}

TEST(EncodeGate, TheWaitingEnterInTheOrderTheyCame) {
  // Each waiter comes once the one before it is seen waiting; then the holder leaves. The
  // waiters enter one by one, first come first, for several rounds (a woken waiter that is not
  // first in line must not take the gate).
  for (int round = 0; round < 20; ++round) {
    EncodeGate gate(/*large_bytes=*/100, /*max_waiting=*/3);
    std::mutex mu;
    std::vector<int> order;
    std::vector<std::thread> waiters;
    {
      const EncodeGate::Pass held = gate.Enter(100);
      ASSERT_TRUE(held.ok());
      for (int i = 0; i < 3; ++i) {
        waiters.emplace_back([&, i] {
          const EncodeGate::Pass p = gate.Enter(1000);
          EXPECT_TRUE(p.ok());
          std::lock_guard<std::mutex> lock(mu);
          order.push_back(i);
        });
        ASSERT_NO_FATAL_FAILURE(WaitUntilWaiting(gate, i + 1));
      }
    }
    for (std::thread& t : waiters) t.join();
    EXPECT_EQ(order, (std::vector<int>{0, 1, 2})) << "round " << round;
  }
}

TEST(EncodeGate, AWaiterWhoseClientLeftGivesUpItsPlace) {
  EncodeGate gate(/*large_bytes=*/100, /*max_waiting=*/2);
  std::atomic<bool> first_gone{false};
  std::atomic<int> gave_up{0}, entered{0};
  std::vector<std::thread> waiters;
  std::optional<EncodeGate::Pass> held(gate.Enter(100));
  ASSERT_TRUE(held->ok());
  waiters.emplace_back([&] {
    const EncodeGate::Pass p = gate.Enter(1000, [&] { return first_gone.load(); });
    if (!p.ok() && p.gone() && !p.closed()) ++gave_up;
  });
  ASSERT_NO_FATAL_FAILURE(WaitUntilWaiting(gate, 1));
  waiters.emplace_back([&] {
    const EncodeGate::Pass p = gate.Enter(1000, [] { return false; });
    if (p.ok()) ++entered;
  });
  ASSERT_NO_FATAL_FAILURE(WaitUntilWaiting(gate, 2));
  EXPECT_FALSE(gate.Enter(1000).ok());  // the line is full
  // The first one's client leaves: it stops waiting while the gate is still held, and its
  // place is free for another.
  first_gone = true;
  waiters.front().join();
  EXPECT_EQ(gave_up.load(), 1);
  EXPECT_EQ(gate.waiting(), 1);
  EXPECT_TRUE(gate.busy());
  EXPECT_EQ(entered.load(), 0);
  // The one left in line enters once the holder leaves.
  held.reset();
  waiters.back().join();
  EXPECT_EQ(entered.load(), 1);
  EXPECT_EQ(gate.waiting(), 0);
  EXPECT_FALSE(gate.busy());
}

}  // namespace
}  // namespace loom::server
