// A worker's epochs: the live workers' shares cover every batch once, and a
// resumed run skips exactly its first clocks while every worker still ticks
// the same number of clocks; with --partition, dead workers' parts are
// dealt to the live ones and trained after their own batches.
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

TEST(BatchSchedule, DeadWorkersPartsAreDealtToTheLiveOnes) {
  struct Case {
    std::vector<uint32_t> live;
    uint32_t workers;
    std::vector<std::vector<uint32_t>> want;  // by position in live
  };
  // Worked by hand: dead parts ascending, the j-th to live[j % live.size()].
  const std::vector<Case> cases = {
      {{0, 1, 2}, 3, {{}, {}, {}}},
      {{0}, 2, {{1}}},
      {{1}, 2, {{0}}},
      {{0, 2}, 4, {{1}, {3}}},
      {{1, 3}, 6, {{0, 4}, {2, 5}}},
      {{2}, 4, {{0, 1, 3}}},
      {{0, 1, 2}, 5, {{3}, {4}, {}}},
  };
  for (const Case& c : cases) {
    for (size_t i = 0; i < c.live.size(); ++i) {
      EXPECT_EQ(adopted_parts(c.live, c.workers, c.live[i]), c.want[i]) << "worker " << c.live[i];
    }
  }
  // A worker that is not live takes nothing.
  EXPECT_TRUE(adopted_parts({0, 2}, 4, 1).empty());
}

TEST(BatchSchedule, AdoptedPartsFollowTheOwnBatchesEachOnce) {
  uint64_t skip = 0;
  const EpochPlan own = plan_epoch(300, 64, 0, 1, {}, true, 3, 2, &skip);  // 5 batches
  const std::vector<AdoptedPart> adopted = {{1, 129}, {3, 64}};           // 3 batches, 1 batch
  const EpochBatches e = epoch_batches(own, adopted, 64, true, 3, 2);
  EXPECT_EQ(e.rows, 300u + 129 + 64);
  ASSERT_EQ(e.order.size(), 9u);
  for (size_t k = 0; k < 5; ++k) EXPECT_EQ(e.order[k], (PartBatch{0, own.order[k]}));
  std::multiset<uint64_t> first, second;
  for (size_t k = 5; k < 8; ++k) {
    EXPECT_EQ(e.order[k].part, 1u);
    first.insert(e.order[k].batch);
  }
  EXPECT_EQ(first, (std::multiset<uint64_t>{0, 1, 2}));
  EXPECT_EQ(e.order[8], (PartBatch{2, 0}));
  // Shuffled as the dead worker's own share would be.
  std::vector<uint64_t> part1;
  for (size_t k = 5; k < 8; ++k) part1.push_back(e.order[k].batch);
  EXPECT_EQ(part1, epoch_order({0, 1, 2}, true, 3, 2, 1));
}

}  // namespace
}  // namespace parafab::worker
