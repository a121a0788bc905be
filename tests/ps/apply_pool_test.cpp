// ApplyPool: every part of a call runs once, parts beyond the caller's on
// other threads, calls follow one another, exceptions reach the caller.
#include "ps/apply_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

namespace parafab::ps {
namespace {

TEST(ApplyPool, EveryPartRunsOnceAndHelpersAreOtherThreads) {
  ApplyPool pool(3);
  ASSERT_EQ(pool.threads(), 3u);
  for (unsigned parts : {1u, 2u, 3u}) {
    std::vector<int> runs(3, 0);
    std::vector<std::thread::id> ids(3);
    pool.run(parts, [&](unsigned p) {
      ++runs[p];  // each part owns its entry
      ids[p] = std::this_thread::get_id();
    });
    for (unsigned p = 0; p < 3; ++p) EXPECT_EQ(runs[p], p < parts ? 1 : 0) << "parts " << parts << ", part " << p;
    EXPECT_EQ(ids[0], std::this_thread::get_id());  // part 0 on the caller
    std::set<std::thread::id> distinct(ids.begin(), ids.begin() + parts);
    EXPECT_EQ(distinct.size(), parts);
  }
}

TEST(ApplyPool, PartsAreClampedToTheThreads) {
  ApplyPool pool(2);
  std::atomic<unsigned> mask{0};
  pool.run(7, [&](unsigned p) { mask |= 1u << p; });
  EXPECT_EQ(mask.load(), 3u);
  mask = 0;
  pool.run(0, [&](unsigned p) { mask |= 1u << p; });
  EXPECT_EQ(mask.load(), 1u);
  EXPECT_THROW(ApplyPool(0), std::invalid_argument);
  ApplyPool alone(1);
  mask = 0;
  alone.run(4, [&](unsigned p) { mask |= 1u << p; });
  EXPECT_EQ(mask.load(), 1u);
}

TEST(ApplyPool, ManyCallsInARowSumExactly) {
  ApplyPool pool(4);
  std::vector<uint64_t> sums(4, 0);
  for (int call = 0; call < 2000; ++call) {
    pool.run(1 + call % 4, [&](unsigned p) { sums[p] += static_cast<uint64_t>(call); });
  }
  // Part p ran in the calls with 1 + call % 4 > p.
  for (unsigned p = 0; p < 4; ++p) {
    uint64_t want = 0;
    for (int call = 0; call < 2000; ++call) {
      if (1u + static_cast<unsigned>(call % 4) > p) want += static_cast<uint64_t>(call);
    }
    EXPECT_EQ(sums[p], want) << "part " << p;
  }
}

TEST(ApplyPool, AnExceptionOfAnyPartReachesTheCallerAndThePoolGoesOn) {
  ApplyPool pool(3);
  for (unsigned thrower : {0u, 1u, 2u}) {
    std::atomic<int> finished{0};
    try {
      pool.run(3, [&](unsigned p) {
        if (p == thrower) throw std::runtime_error("part " + std::to_string(p));
        ++finished;
      });
      ADD_FAILURE() << "no exception from part " << thrower;
    } catch (const std::runtime_error& e) {
      EXPECT_EQ(std::string(e.what()), "part " + std::to_string(thrower));
    }
    EXPECT_EQ(finished.load(), 2);  // the other parts still ran to the end
  }
  std::atomic<int> ran{0};
  pool.run(3, [&](unsigned) { ++ran; });
  EXPECT_EQ(ran.load(), 3);
}

}  // namespace
}  // namespace parafab::ps
