// A worker's epochs: a dead worker's share is trained by a survivor in the
// clocks of its own, so every clock trains what it would have without the
// death, and a resumed run skips exactly its first clocks while every
// worker still ticks the same number of clocks; with --partition, dead
// workers' parts are dealt to the live ones the same way.
#include <gtest/gtest.h>

#include <set>

#include "worker/batch_schedule.h"

namespace parafab::worker {
namespace {

// The batches of each clock of the job, over its live workers: without
// the part index (one shared data set).
std::vector<std::multiset<uint64_t>> job_clocks(uint64_t rows, uint64_t batch, uint32_t workers,
                                                const std::vector<uint32_t>& live, uint64_t skip_total,
                                                uint64_t* seen_rows) {
  std::vector<std::multiset<uint64_t>> clocks;
  for (uint32_t w : live) {
    uint64_t skip = skip_total;
    const EpochPlan p = plan_epoch(rows, batch, w, workers, true, 7, 2, &skip);
    std::vector<AdoptedPart> adopted;
    for (uint32_t dead : adopted_parts(live, workers, w)) adopted.push_back({dead, rows, dead, workers});
    const EpochBatches e = epoch_batches(p, adopted, batch, true, 7, 2);
    *seen_rows += e.rows;
    size_t clock = 0;
    for (const PartBatch& b : e.order) {
      if (clocks.size() <= clock) clocks.resize(clock + 1);
      clocks[clock].insert(b.batch);
      clock += b.ends_clock;
    }
    EXPECT_EQ(clock + e.idle_clocks, p.clocks - p.skipped) << "worker " << w;
  }
  return clocks;
}

TEST(BatchSchedule, ADeadWorkersShareIsTrainedInTheSameClocks) {
  const uint64_t rows = 1000, batch = 64;  // 16 batches, the last short: 6 clocks over 3 workers
  uint64_t all_rows = 0;
  const auto full = job_clocks(rows, batch, 3, {0, 1, 2}, 0, &all_rows);
  EXPECT_EQ(all_rows, rows);
  ASSERT_EQ(full.size(), 6u);
  std::multiset<uint64_t> every;
  for (const auto& c : full) every.insert(c.begin(), c.end());
  EXPECT_EQ(every.size(), 16u);
  EXPECT_EQ(std::set<uint64_t>(every.begin(), every.end()).size(), 16u);
  for (const std::vector<uint32_t>& live :
       {std::vector<uint32_t>{0, 2}, std::vector<uint32_t>{1, 2}, std::vector<uint32_t>{1}}) {
    uint64_t seen_rows = 0;
    EXPECT_EQ(job_clocks(rows, batch, 3, live, 0, &seen_rows), full) << "live " << live.size();
    EXPECT_EQ(seen_rows, rows);
    // A resumed job that skips 4 clocks: the same last 2 clocks.
    seen_rows = 0;
    EXPECT_EQ(job_clocks(rows, batch, 3, live, 4, &seen_rows),
              std::vector<std::multiset<uint64_t>>(full.begin() + 4, full.end()));
  }
}

TEST(BatchSchedule, ResumeSkipsTheFirstClocksOfTheRun) {
  // 10 batches over 3 workers: 4 clocks an epoch; worker 2 has 3 batches.
  for (uint64_t skip_total : {0, 3, 4, 5, 11, 100}) {
    uint64_t skip = skip_total, clocks = 0;
    std::vector<uint64_t> trained, all;
    for (int epoch = 1; epoch <= 3; ++epoch) {
      uint64_t none = 0;
      const EpochBatches full = epoch_batches(plan_epoch(640, 64, 2, 3, true, 1, epoch, &none), {}, 64, true, 1, epoch);
      for (const PartBatch& b : full.order) all.push_back(b.batch);
      all.insert(all.end(), full.idle_clocks, ~uint64_t{0});  // a clock without a batch
      const EpochBatches p = epoch_batches(plan_epoch(640, 64, 2, 3, true, 1, epoch, &skip), {}, 64, true, 1, epoch);
      for (const PartBatch& b : p.order) trained.push_back(b.batch);
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

// --partition: parts of their own length, each shuffled as its worker would,
// the j-th batch of each in the worker's j-th clock.
TEST(BatchSchedule, AdoptedPartsAreTrainedInTheClocksOfTheOwnEachOnce) {
  uint64_t skip = 0;
  const EpochPlan own = plan_epoch(300, 64, 0, 1, true, 3, 2, &skip);  // 5 batches
  const std::vector<AdoptedPart> adopted = {{1, 129}, {3, 64}};       // 3 batches, 1 batch
  const EpochBatches e = epoch_batches(own, adopted, 64, true, 3, 2);
  EXPECT_EQ(e.rows, 300u + 129 + 64);
  EXPECT_EQ(e.idle_clocks, 0u);
  const std::vector<uint64_t> part1 = epoch_order({0, 1, 2}, true, 3, 2, 1);  // as worker 1 shuffles its own
  const std::vector<PartBatch> want = {
      {0, own.order[0], false}, {1, part1[0], false}, {2, 0, true},   // clock 0
      {0, own.order[1], false}, {1, part1[1], true},                  // clock 1
      {0, own.order[2], false}, {1, part1[2], true},                  // clock 2
      {0, own.order[3], true},  {0, own.order[4], true}};             // clocks 3, 4
  EXPECT_EQ(e.order, want);
  // A part longer than the own: its batches go on in clocks of their own.
  const EpochBatches longer = epoch_batches(plan_epoch(64, 64, 0, 1, true, 3, 2, &skip), {{1, 129}}, 64, true, 3, 2);
  ASSERT_EQ(longer.order.size(), 4u);
  EXPECT_FALSE(longer.order[0].ends_clock);
  EXPECT_TRUE(longer.order[1].ends_clock && longer.order[2].ends_clock && longer.order[3].ends_clock);
  EXPECT_EQ(longer.idle_clocks, 0u);
}

}  // namespace
}  // namespace parafab::worker
