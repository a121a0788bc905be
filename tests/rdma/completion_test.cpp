// rdma::Completion against std::future's contract: ready or not without
// waiting, a timed wait that times out, a blocked waiter woken by the
// fulfilment from another thread, one get(), and no lost wake-up when the
// fulfilment races the waiter's arrival.
#include "rdma/completion.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <thread>
#include <vector>

namespace parafab::rdma {
namespace {

using std::chrono::milliseconds;

std::pair<Completion, std::shared_ptr<detail::CompletionState>> pending() {
  auto state = std::make_shared<detail::CompletionState>();
  return {Completion(state), state};
}

TEST(Completion, ReadyCarriesItsStatusAndIsSpentByGet) {
  Completion c = Completion::ready(Status(StatusCode::kTimedOut, "late"));
  ASSERT_TRUE(c.valid());
  EXPECT_TRUE(c.is_ready());
  EXPECT_EQ(c.wait_for(milliseconds(0)), std::future_status::ready);
  const Status s = c.get();
  EXPECT_EQ(s.code(), StatusCode::kTimedOut);
  EXPECT_EQ(s.message(), "late");
  EXPECT_FALSE(c.valid());
  EXPECT_THROW((void)c.get(), std::future_error);
  EXPECT_THROW((void)c.is_ready(), std::future_error);
}

TEST(Completion, DefaultConstructedIsInvalid) {
  Completion c;
  EXPECT_FALSE(c.valid());
  EXPECT_THROW(c.wait(), std::future_error);
  EXPECT_THROW((void)c.wait_for(milliseconds(1)), std::future_error);
}

TEST(Completion, PendingTimesOutThenBecomesReady) {
  auto [c, state] = pending();
  EXPECT_FALSE(c.is_ready());
  EXPECT_EQ(c.wait_for(milliseconds(0)), std::future_status::timeout);
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(c.wait_for(milliseconds(20)), std::future_status::timeout);
  EXPECT_GE(std::chrono::steady_clock::now() - t0, milliseconds(20));
  state->set(Status());
  EXPECT_TRUE(c.is_ready());
  EXPECT_TRUE(c.get().ok());
}

TEST(Completion, ABlockedWaiterIsWokenByTheFulfilment) {
  auto [c, state] = pending();
  std::atomic<bool> waiting{false};
  auto waiter = std::async(std::launch::async, [&, c = std::move(c)]() mutable {
    waiting = true;
    return c.get();  // blocks in the condition variable
  });
  while (!waiting) std::this_thread::yield();
  // Until the waiter is registered, set() may not need to notify; either
  // way the get() must return.
  while (state->waiters.load() == 0 && waiter.wait_for(milliseconds(0)) != std::future_status::ready) {
    std::this_thread::yield();
  }
  state->set(Status(StatusCode::kPeerError, "gone"));
  ASSERT_EQ(waiter.wait_for(std::chrono::seconds(30)), std::future_status::ready) << "the waiter was not woken";
  const Status s = waiter.get();
  EXPECT_EQ(s.code(), StatusCode::kPeerError);
  EXPECT_EQ(s.message(), "gone");
}

// Many fulfilments racing waiters that arrive at the same moment, with and
// without a timeout: each waiter sees its own Status, none sleeps past it.
TEST(Completion, FulfilmentRacingWaitersLosesNoWakeUp) {
  constexpr int kRounds = 2000;
  for (int r = 0; r < kRounds; ++r) {
    auto [c, state] = pending();
    std::atomic<bool> go{false};
    const bool timed = (r % 2) == 0;
    std::thread setter([&, state = state] {
      while (!go) {
      }
      state->set(Status(StatusCode::kInvalidArgument, std::to_string(r)));
    });
    go = true;
    Status s;
    if (timed) {
      ASSERT_EQ(c.wait_for(std::chrono::seconds(30)), std::future_status::ready) << "round " << r;
    } else {
      c.wait();
    }
    s = c.get();
    setter.join();
    ASSERT_EQ(s.code(), StatusCode::kInvalidArgument);
    ASSERT_EQ(s.message(), std::to_string(r));
  }
}

}  // namespace
}  // namespace parafab::rdma
