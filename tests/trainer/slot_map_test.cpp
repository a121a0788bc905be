#include "worker/slot_map.h"

#include <gtest/gtest.h>

namespace parafab::worker {
namespace {

Dataset make(std::vector<std::vector<std::pair<uint64_t, float>>> rows) {
  DatasetArrays a;
  for (const auto& r : rows) {
    a.labels.push_back(1.0f);
    for (auto [k, v] : r) {
      a.keys.push_back(k);
      a.values.push_back(v);
    }
    a.row_ptr.push_back(a.keys.size());
  }
  return Dataset(std::move(a));
}

TEST(SlotMap, SmallKeysMapDirectly) {
  const Dataset d = make({{{3, 1}, {7, 1}}, {}, {{0, 1}}});
  const SlotMap m = SlotMap::for_data(d.view(), 0);
  EXPECT_EQ(m.mode, SlotMode::kDirect);
  EXPECT_EQ(m.dim, 8u);
  EXPECT_EQ(m.bias_slot(), 8u);
  EXPECT_EQ(m.slot(7), 7u);
  EXPECT_EQ(m.slot(8), SlotMap::kDropped);
}

TEST(SlotMap, LargeKeysAreHashed) {
  const Dataset d = make({{{1ULL << 40, 1}}});
  const SlotMap m = SlotMap::for_data(d.view(), 0);
  EXPECT_EQ(m.mode, SlotMode::kHashed);
  EXPECT_EQ(m.dim, 1ULL << SlotMap::kDefaultHashBits);
  EXPECT_LT(m.slot(1ULL << 40), m.dim);
  EXPECT_EQ(m.slot(1ULL << 40), ps::mix64(1ULL << 40) & (m.dim - 1));
}

TEST(SlotMap, HashBitsForceHashing) {
  const Dataset d = make({{{3, 1}}});
  const SlotMap m = SlotMap::for_data(d.view(), 10);
  EXPECT_EQ(m.mode, SlotMode::kHashed);
  EXPECT_EQ(m.dim, 1024u);
  EXPECT_THROW(SlotMap::for_data(d.view(), 40), std::invalid_argument);
}

TEST(SlotCsr, KeepsOrderDropsUnknownAndElidesOnes) {
  const Dataset train = make({{{3, 1}, {1, 1}}, {{2, 1}}});
  const SlotMap m = SlotMap::for_data(train.view(), 0);  // dim 4
  const Dataset test = make({{{3, 1}, {9, 1}, {1, 1}}, {}, {{5, 1}}});
  for (int threads : {1, 2, 3}) {
    const SlotCsr c = SlotCsr::build(test.view(), m, threads);
    EXPECT_EQ(c.row_ptr, (std::vector<uint64_t>{0, 2, 2, 2}));
    EXPECT_EQ(c.cols, (std::vector<uint32_t>{3, 1}));
    EXPECT_TRUE(c.vals.empty()) << "all values are 1";
    EXPECT_EQ(c.dropped, 2u);
    EXPECT_EQ(c.rows(), 3u);
  }
}

TEST(SlotCsr, KeepsValuesWhenNotAllOnes) {
  const Dataset d = make({{{0, 0.5f}, {2, 1}}, {{1, -2}}});
  const SlotCsr c = SlotCsr::build(d.view(), SlotMap::for_data(d.view(), 0), 2);
  EXPECT_EQ(c.vals, (std::vector<float>{0.5f, 1, -2}));
  EXPECT_EQ(c.cols, (std::vector<uint32_t>{0, 2, 1}));
}

}  // namespace
}  // namespace parafab::worker
