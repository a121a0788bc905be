#include "ps/key_partition.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace parafab::ps {
namespace {

class KeyPartitionTest : public ::testing::TestWithParam<uint32_t> {};

TEST_P(KeyPartitionTest, RangesTileTheMixedKeySpace) {
  const uint32_t s = GetParam();
  KeyPartition p(s);
  ASSERT_EQ(p.servers(), s);
  EXPECT_EQ(p.range(0).begin, 0u);
  for (uint32_t i = 0; i + 1 < s; ++i) {
    EXPECT_EQ(p.range(i).end, p.range(i + 1).begin) << "gap or overlap after range " << i;
    EXPECT_FALSE(p.range(i).last);
  }
  EXPECT_TRUE(p.range(s - 1).last);
  // Sizes equal to within one: floor(2^64 / s) or one more.
  const unsigned __int128 full = static_cast<unsigned __int128>(1) << 64;
  for (uint32_t i = 0; i < s; ++i) {
    const unsigned __int128 end = p.range(i).last ? full : p.range(i).end;
    const unsigned __int128 size = end - p.range(i).begin;
    EXPECT_LE(size - full / s, 1u) << "range " << i;
  }
}

TEST_P(KeyPartitionTest, EveryMixedKeyHasExactlyOneOwner) {
  const uint32_t s = GetParam();
  KeyPartition p(s);
  std::vector<uint64_t> probes = {0, 1, std::numeric_limits<uint64_t>::max(), 1ULL << 63};
  for (uint32_t i = 0; i < s; ++i) {  // both sides of every boundary
    probes.push_back(p.range(i).begin);
    if (p.range(i).begin > 0) probes.push_back(p.range(i).begin - 1);
  }
  for (uint64_t k = 0; k < 20000; ++k) probes.push_back(mix64(k));
  for (uint64_t m : probes) {
    int owners = 0;
    uint32_t owner = 0;
    for (uint32_t i = 0; i < s; ++i) {
      if (p.range(i).contains(m)) { ++owners; owner = i; }
    }
    ASSERT_EQ(owners, 1) << "mixed key " << m;
    EXPECT_EQ(p.server_of_mixed(m), owner) << "mixed key " << m;
  }
}

TEST_P(KeyPartitionTest, SequentialKeysSpreadEvenly) {
  const uint32_t s = GetParam();
  KeyPartition p(s);
  const uint64_t n = 200000;
  std::vector<uint64_t> count(s, 0);
  for (uint64_t k = 0; k < n; ++k) ++count[p.server_of(k)];
  // Binomial(n, 1/s): 6 standard deviations.
  const double mean = static_cast<double>(n) / s;
  const double sd = std::sqrt(mean * (1.0 - 1.0 / s));
  for (uint32_t i = 0; i < s; ++i) EXPECT_NEAR(static_cast<double>(count[i]), mean, 6 * sd + 1) << "server " << i;
}

INSTANTIATE_TEST_SUITE_P(Servers, KeyPartitionTest, ::testing::Values(1u, 2u, 3u, 7u, 64u, 1000u));

TEST(KeyPartition, ZeroServersIsRefused) { EXPECT_THROW(KeyPartition(0), std::invalid_argument); }

TEST(Mix64, IsABijectionOnASample) {
  // splitmix64's finalizer is invertible; no two of many keys collide.
  std::vector<uint64_t> v;
  for (uint64_t k = 0; k < 100000; ++k) v.push_back(mix64(k * 0x10001));
  std::sort(v.begin(), v.end());
  EXPECT_EQ(std::adjacent_find(v.begin(), v.end()), v.end());
}

}  // namespace
}  // namespace parafab::ps
