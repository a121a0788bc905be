// The SSP rule and the clock table, against the rule written out by hand.
#include "ps/consistency.h"

#include <gtest/gtest.h>

#include <random>

namespace parafab::ps {
namespace {

TEST(ConsistencyModel, ParsesAndRefuses) {
  EXPECT_EQ(ConsistencyModel::parse("bsp").kind, ConsistencyModel::Kind::kBsp);
  EXPECT_EQ(ConsistencyModel::parse("asp").kind, ConsistencyModel::Kind::kAsp);
  const auto s = ConsistencyModel::parse("ssp:16");
  EXPECT_EQ(s.kind, ConsistencyModel::Kind::kSsp);
  EXPECT_EQ(s.staleness, 16);
  EXPECT_EQ(s.to_string(), "ssp:16");
  for (const char* bad : {"", "ssp", "ssp:", "ssp:-1", "ssp:4x", "BSP", "ssp:99999999999999999999"}) {
    try {
      (void)ConsistencyModel::parse(bad);
      ADD_FAILURE() << "'" << bad << "' accepted";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("expected bsp, asp or ssp:S"), std::string::npos);
    }
  }
}

TEST(ConsistencyModel, TheReadRule) {
  const auto bsp = ConsistencyModel::parse("bsp");
  EXPECT_TRUE(bsp.allows(3, 3));
  EXPECT_FALSE(bsp.allows(4, 3));
  const auto ssp2 = ConsistencyModel::parse("ssp:2");
  EXPECT_TRUE(ssp2.allows(5, 3));
  EXPECT_FALSE(ssp2.allows(6, 3));
  EXPECT_TRUE(ConsistencyModel::parse("asp").allows(1000, 0));
}

TEST(ClockTable, MinimumFollowsABruteForceReference) {
  constexpr uint32_t kWorkers = 5;
  ClockTable t(kWorkers);
  std::vector<int64_t> ref(kWorkers, 0);
  std::vector<bool> live(kWorkers, true);
  std::mt19937 rng(7);
  for (int step = 0; step < 5000; ++step) {
    const uint32_t w = rng() % kWorkers;
    if (step == 2500) {
      t.remove(3);
      live[3] = false;
    }
    const int64_t c = ref[w] + static_cast<int64_t>(rng() % 3) - 1;  // sometimes stale
    const int64_t before = t.min_clock();
    const auto r = t.tick(w, c);
    if (!live[w]) {
      EXPECT_EQ(r, ClockTable::TickResult::kUnknownWorker);
    } else if (c <= ref[w]) {
      EXPECT_EQ(r, ClockTable::TickResult::kStale);
    } else {
      ref[w] = c;
    }
    int64_t m = std::numeric_limits<int64_t>::max();
    for (uint32_t i = 0; i < kWorkers; ++i) {
      if (live[i]) m = std::min(m, ref[i]);
    }
    ASSERT_EQ(t.min_clock(), m) << "step " << step;
    if (r == ClockTable::TickResult::kMinAdvanced) {
      EXPECT_GT(t.min_clock(), before);
    }
  }
  EXPECT_EQ(t.tick(kWorkers, 1), ClockTable::TickResult::kUnknownWorker);
}

TEST(ClockTable, ADeadWorkerLeavesTheMinimum) {
  ClockTable t(2);
  EXPECT_EQ(t.tick(0, 5), ClockTable::TickResult::kAdvanced);
  EXPECT_EQ(t.min_clock(), 0);
  t.remove(1);
  EXPECT_EQ(t.min_clock(), 5);
  t.remove(0);
  EXPECT_EQ(t.min_clock(), std::numeric_limits<int64_t>::max());
}

TEST(StalenessHistogram, BucketsByHowFarBehindTheSlowestWas) {
  StalenessHistogram h(4);
  h.record(5, 5);
  h.record(5, 3);
  h.record(9, 1);  // 8 behind: last bucket
  h.record(2, 7);  // ahead counts as 0
  EXPECT_EQ(h.counts(), (std::vector<uint64_t>{2, 0, 1, 1}));
  EXPECT_EQ(h.total(), 4u);
  EXPECT_EQ(h.max_seen(), 8);
}

}  // namespace
}  // namespace parafab::ps
