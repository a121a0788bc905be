// worker::find_hot_slots: the slots it picks against frequencies planted in
// the data, and the renamed columns against the original ones.
#include "worker/hot_slots.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>
#include <stdexcept>

#include "parafab/config.h"

namespace parafab::worker {
namespace {

constexpr uint64_t kSlots = 1001;  // 1000 feature slots + the bias
constexpr uint32_t kBias = 1000;
// A model past the size renamed by a table indexed by slot: the hash table's
// path (the data still uses slots below 1001).
constexpr uint64_t kBigModel = (uint64_t{1} << 24) + 1;

SlotCsr from_rows(const std::vector<std::vector<uint32_t>>& rows) {
  SlotCsr c;
  c.row_ptr.push_back(0);
  for (const auto& r : rows) {
    c.cols.insert(c.cols.end(), r.begin(), r.end());
    c.row_ptr.push_back(c.cols.size());
    c.labels.push_back(1.0f);
  }
  return c;
}

// Slot 10 * h (h < 20) is in a row with probability 0.95 - 0.04 h: in the
// sample of 8192 rows, neighbours differ by about 330 occurrences, 7 standard
// deviations. Three more nonzeros a row fall uniformly on slots [500, 1000),
// each in about 0.006 of the rows, far below the rarest planted slot (0.19).
SlotCsr planted(size_t rows) {
  std::mt19937_64 rng(4);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::vector<std::vector<uint32_t>> r(rows);
  for (size_t i = 0; i < rows; ++i) {
    for (uint32_t h = 0; h < 20; ++h) {
      if (u(rng) < 0.95 - 0.04 * h) r[i].push_back(10 * h);
    }
    for (int k = 0; k < 3; ++k) r[i].push_back(static_cast<uint32_t>(500 + rng() % 500));
  }
  return from_rows(r);
}

void expect_renamed(const SlotCsr& data, const HotSlots& hot, uint64_t n_slots = kSlots) {
  ASSERT_EQ(hot.cols.size(), data.cols.size());
  const std::vector<uint32_t> cols = hot.cols.to_host();
  const std::set<uint32_t> hot_set(hot.slots.begin(), hot.slots.end());
  for (size_t k = 0; k < cols.size(); ++k) {
    if (cols[k] >= n_slots) {
      const size_t r = cols[k] - n_slots;
      ASSERT_LT(r, hot.slots.size()) << "nonzero " << k;
      ASSERT_GE(r, 1u) << "the bias (hot slot 0) is never a column";
      ASSERT_EQ(hot.slots[r], data.cols[k]) << "nonzero " << k;
    } else {
      ASSERT_EQ(cols[k], data.cols[k]) << "nonzero " << k;
      ASSERT_EQ(hot_set.count(cols[k]), 0u) << "hot slot " << cols[k] << " left unrenamed at " << k;
    }
  }
}

// find_hot_slots writes the renamed columns on the host: the CUDA build
// refuses it (and LocalTrainer does not call it there).
#define SKIP_ON_CUDA() \
  if (PARAFAB_CUDA) GTEST_SKIP() << "find_hot_slots is host backend only"

TEST(HotSlots, PicksTheBiasThenThePlantedSlotsByFrequency) {
  SKIP_ON_CUDA();
  const SlotCsr data = planted(50000);
  for (const uint64_t n_slots : {kSlots, kBigModel}) {
    for (const int threads : {1, 3}) {
      const HotSlots hot = find_hot_slots(data, kBias, n_slots, 11, threads);
      const std::vector<uint32_t> want{kBias, 0, 10, 20, 30, 40, 50, 60, 70, 80, 90};
      EXPECT_EQ(hot.slots, want) << threads << " threads, " << n_slots << " slots";
      expect_renamed(data, hot, n_slots);
    }
    // Room for all 20 planted slots and some of the uniform ones.
    const HotSlots wide = find_hot_slots(data, kBias, n_slots, 40, 2);
    ASSERT_EQ(wide.slots.size(), 40u);
    for (uint32_t h = 0; h < 20; ++h) EXPECT_EQ(wide.slots[h + 1], 10 * h);
    for (size_t r = 21; r < 40; ++r) EXPECT_GE(wide.slots[r], 500u);
    expect_renamed(data, wide, n_slots);
  }
}

TEST(HotSlots, OnlyTheBiasWhenNothingRepeats) {
  SKIP_ON_CUDA();
  // Every slot once: no slot is seen twice in the sample.
  std::vector<std::vector<uint32_t>> rows;
  for (uint32_t i = 0; i < 100; ++i) rows.push_back({i * 3, i * 3 + 1});
  const HotSlots once = find_hot_slots(from_rows(rows), kBias, kSlots, 64, 2);
  EXPECT_EQ(once.slots, std::vector<uint32_t>{kBias});
  EXPECT_EQ(once.cols.size(), 0u);
  const HotSlots empty = find_hot_slots(SlotCsr{{0}, {}, {}, {}, 0}, kBias, kSlots, 64, 2);
  EXPECT_EQ(empty.slots, std::vector<uint32_t>{kBias});
  const HotSlots bias_only = find_hot_slots(planted(1000), kBias, kSlots, 1, 2);
  EXPECT_EQ(bias_only.slots, std::vector<uint32_t>{kBias});
  EXPECT_EQ(bias_only.cols.size(), 0u);
}

TEST(HotSlots, BadArgumentsAreRefused) {
  SKIP_ON_CUDA();
  const SlotCsr data = planted(100);
  EXPECT_THROW((void)find_hot_slots(data, kBias, kSlots, 0, 2), std::invalid_argument);
  EXPECT_THROW((void)find_hot_slots(data, kBias, 0xffffffffu, 2, 2), std::invalid_argument);
}

#if PARAFAB_CUDA
TEST(HotSlots, RefusedOnTheCudaBackend) {
  EXPECT_THROW((void)find_hot_slots(planted(100), kBias, kSlots, 8, 2), std::logic_error);
}
#endif

}  // namespace
}  // namespace parafab::worker
