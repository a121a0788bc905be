// MergedRounds against a float64 reference: random pushes of three workers
// into four rounds, duplicate keys within and across pushes; rounds come
// out oldest first, each key once, in first-arrival order.
#include "ps/merged_rounds.h"

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <tuple>

namespace parafab::ps {
namespace {

TEST(MergedRounds, SparsePushesAreSummedPerRoundTableAndKey) {
  constexpr uint32_t kWidth = 3, kWorkers = 3;
  MergedRounds rounds;
  // (round, table, key) -> summed gradient; and the keys' first-arrival order.
  std::map<std::tuple<int64_t, uint32_t, uint64_t>, std::vector<double>> ref;
  std::map<std::pair<int64_t, uint32_t>, std::vector<uint64_t>> order;
  std::mt19937_64 rng(5);
  for (int push = 0; push < 60; ++push) {
    const int64_t round = static_cast<int64_t>(rng() % 4);
    const uint32_t worker = static_cast<uint32_t>(rng() % kWorkers), table = static_cast<uint32_t>(rng() % 2);
    std::vector<uint64_t> keys(1 + rng() % 40);
    for (uint64_t& k : keys) k = rng() % 50;  // duplicates within a push, and across
    std::vector<float> grads(keys.size() * kWidth);
    for (float& g : grads) g = static_cast<float>(static_cast<int>(rng() % 2001) - 1000) / 64.0f;
    rounds.add_sparse(round, worker, table, keys, grads.data(), kWidth);
    for (size_t i = 0; i < keys.size(); ++i) {
      auto [it, inserted] = ref.try_emplace({round, table, keys[i]}, std::vector<double>(kWidth, 0.0));
      if (inserted) order[{round, table}].push_back(keys[i]);
      for (uint32_t j = 0; j < kWidth; ++j) it->second[j] += grads[i * kWidth + j];
    }
  }
  size_t floats = 0;
  for (const auto& kv : ref) floats += kv.second.size();
  EXPECT_EQ(rounds.floats(), floats);

  size_t keys_out = 0;
  auto check = [&](int64_t round) {
    return MergedRounds::Sink{
        [&, round](uint32_t table, std::span<const uint64_t> keys, const float* grads) {
          EXPECT_EQ(std::vector<uint64_t>(keys.begin(), keys.end()), (order[{round, table}]));
          for (size_t i = 0; i < keys.size(); ++i) {
            const std::vector<double>& want = ref.at({round, table, keys[i]});
            // Sums of multiples of 1/64 below 2^24/64: exact in float.
            for (uint32_t j = 0; j < kWidth; ++j) ASSERT_EQ(grads[i * kWidth + j], want[j]) << "key " << keys[i];
          }
          keys_out += keys.size();
        },
        [](uint32_t, uint64_t, uint64_t, const float*) { ADD_FAILURE() << "no dense push was made"; }};
  };
  // Round by round, so the sink knows which one it is handed.
  for (int64_t round = 0; round < 4; ++round) {
    if (round == 0) {
      EXPECT_EQ(rounds.take_before(0, check(0)), 0u);  // nothing before round 0
    }
    EXPECT_EQ(rounds.take_before(round + 1, check(round)), 1u);
  }
  EXPECT_EQ(keys_out, ref.size());
  EXPECT_TRUE(rounds.empty());
  EXPECT_EQ(rounds.floats(), 0u);
}

// Small pushes into one round until its index has grown several times
// (sized for the first push): every key's sum survives the re-indexing.
TEST(MergedRounds, ARoundThatOutgrowsItsIndexKeepsEverySum) {
  MergedRounds rounds;
  std::map<uint64_t, double> ref;
  std::vector<uint64_t> order;
  std::mt19937_64 rng(9);
  for (int push = 0; push < 1000; ++push) {
    std::vector<uint64_t> keys(10);
    std::vector<float> grads(keys.size());
    for (size_t i = 0; i < keys.size(); ++i) {
      keys[i] = rng() % 20000;  // about 8000 distinct keys in all
      grads[i] = static_cast<float>(rng() % 7) - 3.0f;
      if (ref.try_emplace(keys[i], 0.0).second) order.push_back(keys[i]);
      ref[keys[i]] += grads[i];
    }
    rounds.add_sparse(0, static_cast<uint32_t>(push % 3), 0, keys, grads.data(), 1);
  }
  EXPECT_EQ(rounds.floats(), ref.size());
  size_t seen = 0;
  const MergedRounds::Sink sink{
      [&](uint32_t, std::span<const uint64_t> keys, const float* grads) {
        EXPECT_EQ(std::vector<uint64_t>(keys.begin(), keys.end()), order);
        for (size_t i = 0; i < keys.size(); ++i) ASSERT_EQ(grads[i], ref.at(keys[i])) << "key " << keys[i];
        seen += keys.size();
      },
      [](uint32_t, uint64_t, uint64_t, const float*) { ADD_FAILURE() << "no dense push was made"; }};
  EXPECT_EQ(rounds.take_before(1, sink), 1u);
  EXPECT_EQ(seen, ref.size());
  EXPECT_GT(seen, 4000u);  // well past the first index's 1024 slots
}

TEST(MergedRounds, DenseRangesAreSummedOnlyWithTheSameRows) {
  MergedRounds rounds;
  rounds.add_dense(3, 0, 7, 0, 2, std::vector<float>{1, 2, 3, 4}.data(), 2);
  rounds.add_dense(3, 1, 7, 2, 1, std::vector<float>{10, 20}.data(), 2);  // other rows: a range of its own
  rounds.add_dense(3, 1, 7, 0, 2, std::vector<float>{4, 3, 2, 1}.data(), 2);
  rounds.add_dense(3, 2, 8, 0, 2, std::vector<float>{1, 1, 1, 1}.data(), 2);  // other table
  std::vector<std::tuple<uint32_t, uint64_t, uint64_t, std::vector<float>>> out;
  const MergedRounds::Sink sink{
      [](uint32_t, std::span<const uint64_t>, const float*) { ADD_FAILURE() << "no sparse push was made"; },
      [&](uint32_t table, uint64_t first, uint64_t rows, const float* g) {
        out.emplace_back(table, first, rows, std::vector<float>(g, g + rows * 2));
      }};
  EXPECT_EQ(rounds.take_before(3, sink), 0u);  // round 3 is not before clock 3
  EXPECT_EQ(rounds.take_before(4, sink), 1u);
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[0], std::make_tuple(7u, uint64_t{0}, uint64_t{2}, std::vector<float>{5, 5, 5, 5}));
  EXPECT_EQ(out[1], std::make_tuple(7u, uint64_t{2}, uint64_t{1}, std::vector<float>{10, 20}));
  EXPECT_EQ(out[2], std::make_tuple(8u, uint64_t{0}, uint64_t{2}, std::vector<float>{1, 1, 1, 1}));
}

TEST(MergedRounds, NewestOfNamesTheLastRoundAWorkerPushedInto) {
  MergedRounds rounds;
  const uint64_t key = 1;
  const float g = 1;
  EXPECT_FALSE(rounds.newest_of(0).has_value());
  rounds.add_sparse(2, 0, 0, {&key, 1}, &g, 1);
  rounds.add_sparse(5, 0, 0, {&key, 1}, &g, 1);
  rounds.add_sparse(4, 1, 0, {&key, 1}, &g, 1);
  EXPECT_EQ(rounds.newest_of(0), 5);
  EXPECT_EQ(rounds.newest_of(1), 4);
  EXPECT_FALSE(rounds.newest_of(2).has_value());
  const MergedRounds::Sink sink{[](uint32_t, std::span<const uint64_t>, const float*) {},
                                [](uint32_t, uint64_t, uint64_t, const float*) {}};
  EXPECT_EQ(rounds.take_before(5, sink), 2u);  // rounds 2 and 4
  EXPECT_EQ(rounds.newest_of(0), 5);
  EXPECT_FALSE(rounds.newest_of(1).has_value());
  EXPECT_EQ(rounds.rounds(), 1u);
}

}  // namespace
}  // namespace parafab::ps
