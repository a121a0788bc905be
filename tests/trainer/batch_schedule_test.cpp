// A worker's epochs: the live workers' shares cover every batch once, and a
// resumed run skips exactly its first clocks while every worker still ticks
// the same number of clocks.
#include <gtest/gtest.h>

#include <set>

#include "worker/batch_schedule.h"

namespace parafab::worker {
namespace {

TEST(BatchSchedule, LiveWorkersShareEveryBatchOnce) {
  const uint64_t rows = 1000, batch = 64;  // 16 batches, the last short
  for (const std::vector<uint32_t>& live : {std::vector<uint32_t>{0, 1, 2}, std::vector<uint32_t>{0, 2}}) {
    std::multiset<uint64_t> seen;
    uint64_t seen_rows = 0;
    for (uint32_t w : live) {
      uint64_t skip = 0;
      const EpochPlan p = plan_epoch(rows, batch, w, 3, [&] { return live; }, true, 7, 2, &skip);
      seen.insert(p.order.begin(), p.order.end());
      seen_rows += p.rows;
      EXPECT_EQ(p.order.size() + p.idle_clocks, (16 + live.size() - 1) / live.size());
    }
    EXPECT_EQ(seen.size(), 16u);
    EXPECT_EQ(std::set<uint64_t>(seen.begin(), seen.end()).size(), 16u);
    EXPECT_EQ(seen_rows, rows);
  }
}

TEST(BatchSchedule, ResumeSkipsTheFirstClocksOfTheRun) {
  // 10 batches over 3 workers: 4 clocks an epoch; worker 2 has 3 batches.
  for (uint64_t skip_total : {0, 3, 4, 5, 11, 100}) {
    uint64_t skip = skip_total, clocks = 0;
    std::vector<uint64_t> trained, all;
    for (int epoch = 1; epoch <= 3; ++epoch) {
      uint64_t none = 0;
      const EpochPlan full = plan_epoch(640, 64, 2, 3, {}, true, 1, epoch, &none);
      all.insert(all.end(), full.order.begin(), full.order.end());
      all.insert(all.end(), full.idle_clocks, ~uint64_t{0});  // a clock without a batch
      const EpochPlan p = plan_epoch(640, 64, 2, 3, {}, true, 1, epoch, &skip);
      trained.insert(trained.end(), p.order.begin(), p.order.end());
      trained.insert(trained.end(), p.idle_clocks, ~uint64_t{0});
      clocks += p.order.size() + p.idle_clocks;
    }
    const uint64_t skipped = std::min<uint64_t>(skip_total, 12);
    EXPECT_EQ(clocks, 12 - skipped) << skip_total;
    EXPECT_EQ(skip, skip_total - skipped);
    // What is left is the tail of the unskipped run, clock for clock.
    EXPECT_EQ(trained, std::vector<uint64_t>(all.begin() + static_cast<ptrdiff_t>(skipped), all.end())) << skip_total;
  }
}

}  // namespace
}  // namespace parafab::worker
