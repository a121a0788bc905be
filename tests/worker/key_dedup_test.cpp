// worker::KeyDedup against std::unordered_map: first occurrences and
// duplicates, the key equal to every bit set, tables kept per thread across
// KeyDedups of several sizes, and two alive at once on one thread.
#include "worker/key_dedup.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <unordered_map>
#include <utility>
#include <vector>

namespace parafab::worker {
namespace {

struct Expected {
  std::vector<uint32_t> first;
  std::vector<std::pair<uint32_t, uint32_t>> duplicates;
};

Expected reference(const std::vector<uint64_t>& keys) {
  Expected e;
  std::unordered_map<uint64_t, uint32_t> seen;
  for (uint32_t i = 0; i < keys.size(); ++i) {
    auto [it, fresh] = seen.try_emplace(keys[i], i);
    if (fresh) {
      e.first.push_back(i);
    } else {
      e.duplicates.emplace_back(i, it->second);
    }
  }
  return e;
}

// n keys drawn from `distinct` random ones, with 0 and ~0 among them.
std::vector<uint64_t> draw(size_t n, size_t distinct, std::mt19937_64& rng) {
  std::vector<uint64_t> pool(distinct);
  for (uint64_t& k : pool) k = rng();
  pool[0] = 0;
  if (distinct > 1) pool[1] = ~uint64_t{0};
  std::vector<uint64_t> keys(n);
  for (uint64_t& k : keys) k = pool[rng() % distinct];
  return keys;
}

void expect_matches(const std::vector<uint64_t>& keys, KeyDedup& d) {
  std::vector<uint32_t> first;
  std::vector<std::pair<uint32_t, uint32_t>> duplicates;
  d.insert_all(keys, first, duplicates);
  const Expected want = reference(keys);
  EXPECT_EQ(first, want.first);
  EXPECT_EQ(duplicates, want.duplicates);
}

TEST(KeyDedup, MatchesAHashMapOverSuccessiveBatchesOfSeveralSizes) {
  std::mt19937_64 rng(3);
  // Sizes go up and down, so a later batch reuses a larger table in part
  // and must not see an earlier batch's keys (600000 keys: a table of its own).
  for (const size_t n : {1000u, 50u, 100000u, 10u, 600000u, 3000u, 3000u, 1u}) {
    for (const size_t distinct : {n, n / 3 + 1}) {
      const std::vector<uint64_t> keys = draw(n, distinct, rng);
      KeyDedup d(keys.size());
      expect_matches(keys, d);
    }
  }
}

TEST(KeyDedup, TheSameKeysAgainAreNewToTheNextKeyDedup) {
  std::mt19937_64 rng(4);
  const std::vector<uint64_t> keys = draw(500, 200, rng);
  for (int round = 0; round < 3; ++round) {
    KeyDedup d(keys.size());
    expect_matches(keys, d);
  }
}

TEST(KeyDedup, TwoAliveOnOneThreadKeepApart) {
  std::mt19937_64 rng(5);
  const std::vector<uint64_t> a = draw(2000, 700, rng);
  const std::vector<uint64_t> b = draw(2000, 900, rng);
  KeyDedup da(a.size());
  KeyDedup db(b.size());
  // Interleaved, key by key.
  std::unordered_map<uint64_t, uint32_t> ra, rb;
  for (uint32_t i = 0; i < a.size(); ++i) {
    const auto got_a = da.insert(a[i], i);
    const auto got_b = db.insert(b[i], i);
    const auto [ia, fa] = ra.try_emplace(a[i], i);
    const auto [ib, fb] = rb.try_emplace(b[i], i);
    ASSERT_EQ(got_a, std::make_pair(ia->second, fa)) << "a, key " << i;
    ASSERT_EQ(got_b, std::make_pair(ib->second, fb)) << "b, key " << i;
  }
}

}  // namespace
}  // namespace parafab::worker
