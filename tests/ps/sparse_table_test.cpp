// SparseTable against independent references: a std::unordered_map running
// apply_update on plain per-key arrays (exact, every updater and width), and a
// float64 formula written here (SGD, AdaGrad; within float rounding). Also the
// width-1 fast path against apply_update bit for bit, absent keys, the sentinel
// key, growth, concurrency, refusals, memory, for_each; and one measurement
// that only prints (keys/s of a 10^5-key AdaGrad push, resident bytes/key).
#include "ps/sparse_table.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <numeric>
#include <random>
#include <stdexcept>
#include <thread>
#include <tuple>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "ps/apply_pool.h"
#include "ps/key_hash.h"
#include "ps/key_partition.h"
#include "ps/updaters/batched_width1.h"

namespace parafab::ps {
namespace {

constexpr uint64_t kSentinel = ~uint64_t{0};

TableSchema sparse_schema(UpdaterKind kind, uint32_t width, InitializerKind init = InitializerKind::kZeros) {
  TableSchema t;
  t.id = 7;
  t.kind = TableKind::kSparse;
  t.width = width;
  t.init.kind = init;
  t.init.stddev = 0.5f;
  t.init.seed = 1234;
  t.updater.kind = kind;
  t.updater.learning_rate = 0.05f;
  if (kind != UpdaterKind::kFtrl) t.updater.l2 = 0.01f;
  if (kind == UpdaterKind::kSgd || kind == UpdaterKind::kAdaGrad) t.updater.l1 = 0.001f;
  t.validate();
  return t;
}

std::vector<uint64_t> unique_random_keys(size_t n, std::mt19937_64& rng) {
  std::unordered_set<uint64_t> seen;
  std::vector<uint64_t> keys;
  keys.reserve(n);
  while (keys.size() < n) {
    const uint64_t k = rng();
    if (seen.insert(k).second) keys.push_back(k);
  }
  return keys;
}

// Reference: per key, value then state as floats, updated by apply_update.
struct ExactRef {
  const TableSchema& t;
  size_t state;
  std::unordered_map<uint64_t, std::vector<float>> rows;
  explicit ExactRef(const TableSchema& schema)
      : t(schema), state(state_floats_per_key(schema.updater.kind, schema.width)) {}
  PushResult push(const std::vector<uint64_t>& keys, const std::vector<float>& grads) {
    PushResult r;
    for (size_t i = 0; i < keys.size(); ++i) {
      const float* g = grads.data() + i * t.width;
      if (!all_finite(g, t.width)) {
        ++r.refused_non_finite;
        continue;
      }
      auto [it, fresh] = rows.try_emplace(keys[i]);
      if (fresh) {
        it->second.resize(t.width + state);
        initialize_value(t.init, keys[i], it->second.data(), t.width);
        initialize_state(t.updater, it->second.data(), it->second.data() + t.width, t.width);
        ++r.inserted;
      }
      if (apply_update(t.updater, it->second.data(), it->second.data() + t.width, g, t.width) ==
          UpdateStatus::kApplied) {
        ++r.applied;
      } else {
        ++r.refused_non_finite;
      }
    }
    return r;
  }
};

std::vector<float> pull_all(const SparseTable& table, const std::vector<uint64_t>& keys) {
  std::vector<float> out(keys.size() * table.schema().width, -12345.0f);
  table.pull(keys, out.data());
  return out;
}

void expect_bits_equal(float a, float b, const std::string& what) {
  uint32_t x, y;
  std::memcpy(&x, &a, 4);
  std::memcpy(&y, &b, 4);
  EXPECT_EQ(x, y) << what << ": " << a << " vs " << b;
}

// Every key the table holds against the reference, value and state bit for
// bit, and no key missing.
void expect_same_as_ref(const SparseTable& table, const ExactRef& ref) {
  const uint32_t width = table.schema().width;
  size_t visited = 0;
  table.for_each([&](uint64_t key, const float* value, const float* state) {
    auto it = ref.rows.find(key);
    ASSERT_NE(it, ref.rows.end()) << key;
    for (size_t c = 0; c < it->second.size(); ++c) {
      expect_bits_equal(c < width ? value[c] : state[c - width], it->second[c], "key " + std::to_string(key));
    }
    ++visited;
  });
  EXPECT_EQ(visited, ref.rows.size());
}

// values (keys.size() x width, as pulled) against the reference bit for
// bit: a key it holds reads its row, any other its initial value.
void expect_pulled_as_ref(const std::vector<float>& values, const std::vector<uint64_t>& keys, const ExactRef& ref) {
  const uint32_t width = ref.t.width;
  std::vector<float> want(width);
  for (size_t i = 0; i < keys.size(); ++i) {
    if (auto it = ref.rows.find(keys[i]); it != ref.rows.end()) {
      std::copy_n(it->second.begin(), width, want.begin());
    } else {
      initialize_value(ref.t.init, keys[i], want.data(), width);
    }
    for (uint32_t c = 0; c < width; ++c) {
      expect_bits_equal(values[i * width + c], want[c], "key " + std::to_string(keys[i]));
    }
  }
}

// At least n keys drawn from universe, one in every `again` followed by
// itself (a key given twice in one push, right after itself too).
std::vector<uint64_t> keys_with_repeats(const std::vector<uint64_t>& universe, size_t n, uint64_t again,
                                        std::mt19937_64& rng) {
  std::vector<uint64_t> keys;
  while (keys.size() < n) {
    keys.push_back(universe[rng() % universe.size()]);
    if (rng() % again == 0) keys.push_back(keys.back());
  }
  return keys;
}

// `rounds` pushes of at least n keys drawn from universe, repeats included
// (keys_with_repeats), with normal gradients, into the table (through
// `pool` if given) and the reference alike: the counts agree push by push.
void push_rounds_with_repeats(SparseTable& table, ExactRef& ref, const std::vector<uint64_t>& universe, int rounds,
                              size_t n, std::mt19937_64& rng, ApplyPool* pool = nullptr) {
  const uint32_t width = table.schema().width;
  std::normal_distribution<float> gauss(0.0f, 1.0f);
  for (int round = 0; round < rounds; ++round) {
    const std::vector<uint64_t> keys = keys_with_repeats(universe, n, 8, rng);
    std::vector<float> grads(keys.size() * width);
    for (float& g : grads) g = gauss(rng);
    const PushResult got = table.push(keys, grads.data(), pool);
    const PushResult want = ref.push(keys, grads);
    ASSERT_EQ(got.applied, want.applied) << "round " << round;
    ASSERT_EQ(got.inserted, want.inserted) << "round " << round;
    ASSERT_EQ(got.refused_non_finite, want.refused_non_finite) << "round " << round;
  }
}

// ---- exact agreement with apply_update, every updater and width -------------

class SparseExact : public ::testing::TestWithParam<std::tuple<UpdaterKind, uint32_t, unsigned>> {};

TEST_P(SparseExact, MatchesApplyUpdateOnPlainArrays) {
  const auto [kind, width, shards] = GetParam();
  const TableSchema t = sparse_schema(kind, width, InitializerKind::kNormal);
  SparseTable table(t, shards);
  ExactRef ref(t);
  std::mt19937_64 rng(42 + width);
  const std::vector<uint64_t> universe = unique_random_keys(3000, rng);
  std::normal_distribution<float> gauss(0.0f, 1.0f);
  for (int round = 0; round < 30; ++round) {
    // A random unique subset: a mix of present and absent keys.
    std::vector<uint64_t> keys;
    for (uint64_t k : universe) {
      if (rng() % 4 == 0) keys.push_back(k);
    }
    std::vector<float> grads(keys.size() * width);
    for (size_t i = 0; i < grads.size(); ++i) grads[i] = gauss(rng) * (1.0f + static_cast<float>(i % 5));
    const PushResult got = table.push(keys, grads.data());
    const PushResult want = ref.push(keys, grads);
    ASSERT_EQ(got.applied, want.applied);
    ASSERT_EQ(got.inserted, want.inserted);
    ASSERT_EQ(got.refused_non_finite, want.refused_non_finite);
  }
  ASSERT_EQ(table.size(), ref.rows.size());
  expect_pulled_as_ref(pull_all(table, universe), universe, ref);
  // State too, through for_each.
  size_t visited = 0;
  table.for_each([&, width = width](uint64_t key, const float* value, const float* state) {
    ++visited;
    auto it = ref.rows.find(key);
    ASSERT_NE(it, ref.rows.end()) << key;
    for (size_t c = 0; c < width + ref.state; ++c) {
      const float got = c < width ? value[c] : state[c - width];
      expect_bits_equal(got, it->second[c], "for_each key " + std::to_string(key));
    }
  });
  EXPECT_EQ(visited, ref.rows.size());
}

INSTANTIATE_TEST_SUITE_P(
    Updaters, SparseExact,
    ::testing::Combine(::testing::Values(UpdaterKind::kSgd, UpdaterKind::kAdaGrad, UpdaterKind::kFtrl,
                                         UpdaterKind::kAdam),
                       ::testing::Values(1u, 3u), ::testing::Values(1u, 64u)),
    [](const auto& info) {
      return std::string(to_string(std::get<0>(info.param))) + "_w" + std::to_string(std::get<1>(info.param)) +
             "_s" + std::to_string(std::get<2>(info.param));
    });

// ---- float64 reference of the formulas (SGD, AdaGrad) -----------------------

double shrink(double u, double t) { return (u > 0 ? 1.0 : (u < 0 ? -1.0 : 0.0)) * std::max(std::fabs(u) - t, 0.0); }

TEST(SparseTable, AdaGradAndSgdWithinFloatRoundingOfFloat64Formulas) {
  for (UpdaterKind kind : {UpdaterKind::kSgd, UpdaterKind::kAdaGrad}) {
    for (uint32_t width : {1u, 4u}) {
      const TableSchema t = sparse_schema(kind, width, InitializerKind::kNormal);
      const UpdaterConfig& c = t.updater;
      SparseTable table(t);
      std::unordered_map<uint64_t, std::vector<double>> ref;  // w[0, width), G[0, width)
      std::mt19937_64 rng(7);
      const std::vector<uint64_t> universe = unique_random_keys(2000, rng);
      std::uniform_real_distribution<float> ug(-2.0f, 2.0f);
      for (int round = 0; round < 20; ++round) {
        std::vector<uint64_t> keys;
        for (uint64_t k : universe) {
          if (rng() % 3 == 0) keys.push_back(k);
        }
        std::vector<float> grads(keys.size() * width);
        for (float& g : grads) g = ug(rng);
        (void)table.push(keys, grads.data());
        for (size_t i = 0; i < keys.size(); ++i) {
          auto [it, fresh] = ref.try_emplace(keys[i]);
          std::vector<double>& r = it->second;
          if (fresh) {
            std::vector<float> init(width);
            initialize_value(t.init, keys[i], init.data(), width);
            r.assign(2 * width, double{c.adagrad_initial_accumulator});
            for (uint32_t j = 0; j < width; ++j) r[j] = init[j];
          }
          for (uint32_t j = 0; j < width; ++j) {
            const double g = double{grads[i * width + j]} + double{c.l2} * r[j];
            double eta = c.learning_rate;
            if (kind == UpdaterKind::kAdaGrad) {
              r[width + j] += g * g;
              eta = double{c.learning_rate} / (double{c.adagrad_epsilon} + std::sqrt(r[width + j]));
            }
            r[j] = shrink(r[j] - eta * g, eta * c.l1);
          }
        }
      }
      const std::vector<float> got = pull_all(table, universe);
      for (size_t i = 0; i < universe.size(); ++i) {
        auto it = ref.find(universe[i]);
        if (it == ref.end()) continue;
        for (uint32_t j = 0; j < width; ++j) {
          const double want = it->second[j];
          EXPECT_NEAR(got[i * width + j], want, 1e-5 * std::max(1.0, std::fabs(want)))
              << to_string(kind) << " width " << width << " key " << universe[i];
        }
      }
    }
  }
}

// ---- the width-1 fast path is apply_update, bit for bit ---------------------

TEST(SparseTable, Width1FastPathIsBitIdenticalToApplyUpdate) {
  std::mt19937_64 rng(99);
  // Values across many magnitudes, including ones whose updates overflow.
  auto wild = [&]() {
    const int e = static_cast<int>(rng() % 260) - 130;
    const float m = std::uniform_real_distribution<float>(-2.0f, 2.0f)(rng);
    return std::ldexp(m, e);
  };
  size_t refusals = 0;
  for (UpdaterKind kind : {UpdaterKind::kSgd, UpdaterKind::kAdaGrad}) {
    for (float l1 : {0.0f, 0.01f}) {
      for (float l2 : {0.0f, 0.1f}) {
        UpdaterConfig c;
        c.kind = kind;
        c.learning_rate = 0.3f;
        c.l1 = l1;
        c.l2 = l2;
        c.validate();
        const updaters::Width1Params p(c);
        // The table steps keys in blocks of up to kWidth1Block: every block
        // length, the odd ones too, 200000 keys in all.
        for (int done = 0; done < 200000;) {
          const size_t n = 1 + rng() % updaters::kWidth1Block;
          std::vector<float> v(n), acc(n), g(n);
          for (size_t k = 0; k < n; ++k) {
            v[k] = wild();
            acc[k] = std::fabs(wild());
            do {
              g[k] = wild();
            } while (!std::isfinite(g[k]));  // the tables count those before any step
          }
          std::vector<float> v_block = v, acc_block = acc;
          const int misfits = kind == UpdaterKind::kSgd
                                  ? updaters::sgd_block_w1(p, v_block.data(), g.data(), n)
                                  : updaters::adagrad_block_w1(p, v_block.data(), acc_block.data(), g.data(), n);
          int want_misfits = 0;
          for (size_t k = 0; k < n; ++k) {
            // apply_update leaves value and state as they were when it refuses.
            const bool applied = apply_update(c, &v[k], &acc[k], &g[k], 1) == UpdateStatus::kApplied;
            want_misfits += applied ? 0 : 1;
            uint32_t a, b;
            std::memcpy(&a, &v[k], 4);
            std::memcpy(&b, &v_block[k], 4);
            ASSERT_EQ(a, b) << "value after g=" << g[k];
            std::memcpy(&a, &acc[k], 4);
            std::memcpy(&b, &acc_block[k], 4);
            ASSERT_EQ(a, b) << "accumulator";
          }
          ASSERT_EQ(misfits, want_misfits);
          refusals += static_cast<size_t>(misfits);
          done += static_cast<int>(n);
        }
      }
    }
  }
  EXPECT_GT(refusals, 0u);  // the overflow cases were exercised
}

// The contract: keys are unique within a push, and a key given twice is
// applied twice, in order. The width-1 path steps keys in blocks; a key
// coming again within a block must see its first update.
TEST(SparseTable, AKeyGivenTwiceInOnePushIsAppliedTwiceInOrder) {
  for (UpdaterKind kind : {UpdaterKind::kSgd, UpdaterKind::kAdaGrad}) {
    const TableSchema t = sparse_schema(kind, 1, InitializerKind::kNormal);
    SparseTable table(t, 4);
    ExactRef ref(t);
    std::mt19937_64 rng(11);
    const std::vector<uint64_t> universe = unique_random_keys(300, rng);
    push_rounds_with_repeats(table, ref, universe, 5, 5000, rng);
    expect_same_as_ref(table, ref);
  }
}

// A width-1 push marks each slot it has taken into a block by writing a NaN
// of one payload (0x7FA1B10C) into its value until the block is written
// back. Values that are NaNs already, that payload included (only a restore
// puts them there), are stepped as apply_update steps them, each time they
// are given (twice in a row too), and the keys around them as well.
TEST(SparseTable, NaNValuesInWidth1BlocksMatchTheReference) {
  for (UpdaterKind kind : {UpdaterKind::kSgd, UpdaterKind::kAdaGrad}) {
    const TableSchema t = sparse_schema(kind, 1, InitializerKind::kNormal);
    SparseTable table(t, 2);
    ExactRef ref(t);
    const uint32_t nan_bits[] = {0x7FA1B10Cu, 0x7FC00000u, 0xFFC00001u};
    const uint64_t nan_keys[] = {101, 202, 303};
    const std::vector<float> state(table.state_floats(), 0.5f);
    for (int i = 0; i < 3; ++i) {
      const float v = std::bit_cast<float>(nan_bits[i]);
      table.restore(nan_keys[i], &v, state.data());
      ref.rows[nan_keys[i]] = {v};
      ref.rows[nan_keys[i]].resize(1 + state.size(), 0.5f);
    }
    std::mt19937_64 rng(21);
    std::vector<uint64_t> universe = unique_random_keys(200, rng);
    universe.insert(universe.end(), std::begin(nan_keys), std::end(nan_keys));
    push_rounds_with_repeats(table, ref, universe, 3, 3000, rng);
    // And each NaN key given twice in a row, for certain.
    const std::vector<uint64_t> keys = {nan_keys[0], nan_keys[0], universe[0], nan_keys[1], nan_keys[2], nan_keys[2]};
    const std::vector<float> grads = {0.5f, -0.25f, 1.0f, 2.0f, -1.0f, 0.125f};
    const PushResult got = table.push(keys, grads.data());
    const PushResult want = ref.push(keys, grads);
    EXPECT_EQ(got.applied, want.applied);
    EXPECT_EQ(got.refused_non_finite, want.refused_non_finite);
    expect_same_as_ref(table, ref);
  }
}

// With a pool, a push of many keys is applied by several threads, each over
// a run of sub-shards: against the in-order reference bit for bit, keys
// given twice (in order: a key's entries stay in one sub-shard, one thread),
// non-finite gradients, inserts and growth included; pulls split the same way.
TEST(SparseTable, PushesAndPullsSplitOverAPoolMatchTheReferenceExactly) {
  ApplyPool pool(3);
  for (const auto& [kind, width] : {std::pair{UpdaterKind::kAdaGrad, 1u}, std::pair{UpdaterKind::kSgd, 1u},
                                    std::pair{UpdaterKind::kAdam, 3u}}) {
    const TableSchema t = sparse_schema(kind, width, InitializerKind::kNormal);
    SparseTable table(t);
    ExactRef ref(t);
    std::mt19937_64 rng(23);
    const std::vector<uint64_t> universe = unique_random_keys(60000, rng);
    std::normal_distribution<float> gauss(0.0f, 1.0f);
    for (int round = 0; round < 4; ++round) {
      const std::vector<uint64_t> keys = keys_with_repeats(universe, 40000, 16, rng);
      std::vector<float> grads(keys.size() * width);
      for (float& g : grads) g = gauss(rng);
      grads[rng() % grads.size()] = std::numeric_limits<float>::quiet_NaN();
      const PushResult got = table.push(keys, grads.data(), &pool);
      const PushResult want = ref.push(keys, grads);
      ASSERT_EQ(got.applied, want.applied) << to_string(kind);
      ASSERT_EQ(got.inserted, want.inserted);
      ASSERT_EQ(got.refused_non_finite, want.refused_non_finite);
    }
    std::vector<float> out(universe.size() * width, -1.0f);
    table.pull(universe, out.data(), &pool);
    EXPECT_EQ(out, pull_all(table, universe)) << "a pull split over the pool reads what one thread reads";
    expect_pulled_as_ref(out, universe, ref);
    expect_same_as_ref(table, ref);
  }
}

// ---- absent keys, the sentinel key ------------------------------------------

TEST(SparseTable, AbsentKeysReadTheirInitialValueAndAreNotInserted) {
  const TableSchema t = sparse_schema(UpdaterKind::kAdaGrad, 5, InitializerKind::kNormal);
  SparseTable table(t);
  std::mt19937_64 rng(3);
  const std::vector<uint64_t> keys = unique_random_keys(1000, rng);
  const std::vector<float> got = pull_all(table, keys);
  EXPECT_EQ(table.size(), 0u);
  bool any_nonzero = false;
  for (size_t i = 0; i < keys.size(); ++i) {
    std::vector<float> want(5);
    initialize_value(t.init, keys[i], want.data(), 5);
    for (int c = 0; c < 5; ++c) {
      expect_bits_equal(got[i * 5 + c], want[c], "absent key");
      any_nonzero |= want[c] != 0.0f;
    }
  }
  EXPECT_TRUE(any_nonzero);
  // A second table agrees (every server and every run).
  SparseTable other(t, 7);
  EXPECT_EQ(pull_all(other, keys), got);
  // Pushing half leaves the other half absent and still initial.
  std::vector<uint64_t> half(keys.begin(), keys.begin() + 500);
  std::vector<float> grads(half.size() * 5, 0.25f);
  EXPECT_EQ(table.push(half, grads.data()).inserted, 500u);
  EXPECT_EQ(table.size(), 500u);
  const std::vector<float> again = pull_all(table, keys);
  EXPECT_TRUE(std::equal(again.begin() + 500 * 5, again.end(), got.begin() + 500 * 5));
  EXPECT_EQ(table.size(), 500u);
}

TEST(SparseTable, SentinelKeyIsAnOrdinaryKey) {
  for (UpdaterKind kind : {UpdaterKind::kAdaGrad, UpdaterKind::kFtrl}) {
    const TableSchema t = sparse_schema(kind, 2, InitializerKind::kNormal);
    SparseTable table(t);
    ExactRef ref(t);
    const std::vector<uint64_t> keys = {kSentinel, 0, 1, kSentinel - 1};
    std::vector<float> before(8);
    table.pull(keys, before.data());
    EXPECT_EQ(table.size(), 0u);
    std::vector<float> want_init(2);
    initialize_value(t.init, kSentinel, want_init.data(), 2);
    EXPECT_EQ(before[0], want_init[0]);
    EXPECT_EQ(before[1], want_init[1]);
    for (int round = 0; round < 3; ++round) {
      std::vector<float> grads = {0.5f, -1.0f, 0.25f, 2.0f, -0.75f, 1.5f, 3.0f, -3.0f};
      const PushResult r = table.push(keys, grads.data());
      const PushResult w = ref.push(keys, grads);
      EXPECT_EQ(r.inserted, w.inserted);
      EXPECT_EQ(r.applied, 4u);
    }
    EXPECT_EQ(table.size(), 4u);
    const std::vector<float> got = pull_all(table, keys);
    for (size_t i = 0; i < keys.size(); ++i) {
      for (int c = 0; c < 2; ++c) expect_bits_equal(got[i * 2 + c], ref.rows[keys[i]][c], "sentinel test");
    }
    size_t sentinel_visits = 0, visits = 0;
    table.for_each([&](uint64_t key, const float* value, const float*) {
      ++visits;
      if (key == kSentinel) {
        ++sentinel_visits;
        EXPECT_EQ(value[0], ref.rows[kSentinel][0]);
      }
    });
    EXPECT_EQ(sentinel_visits, 1u);
    EXPECT_EQ(visits, 4u);
  }
}

// ---- growth ------------------------------------------------------------------

TEST(SparseTable, GrowthKeepsEveryKeyValueAndState) {
  for (unsigned shards : {1u, 4u, 64u}) {
    const TableSchema t = sparse_schema(UpdaterKind::kAdaGrad, 1);
    SparseTable table(t, shards);
    std::mt19937_64 rng(shards);
    const std::vector<uint64_t> keys = unique_random_keys(200000, rng);
    // Key i gets gradient g_i = distinct, pushed in small batches so the table
    // grows many times between them.
    std::vector<float> grads(keys.size());
    for (size_t i = 0; i < keys.size(); ++i) grads[i] = static_cast<float>(i % 1000) / 64.0f - 7.0f;
    size_t last_memory = 0, growths = 0;
    for (size_t at = 0; at < keys.size(); at += 997) {
      const size_t n = std::min<size_t>(997, keys.size() - at);
      const PushResult r = table.push(std::span(keys.data() + at, n), grads.data() + at);
      ASSERT_EQ(r.inserted, n);
      ASSERT_EQ(r.applied, n);
      const size_t m = table.memory_bytes();
      growths += m != last_memory;
      last_memory = m;
    }
    EXPECT_GT(growths, 10u);
    ASSERT_EQ(table.size(), keys.size());
    const std::vector<float> got = pull_all(table, keys);
    for (size_t i = 0; i < keys.size(); ++i) {
      float v = 0.0f, acc = t.updater.adagrad_initial_accumulator;
      (void)apply_update(t.updater, &v, &acc, &grads[i], 1);
      ASSERT_EQ(got[i], v) << "key " << keys[i] << " shards " << shards;
    }
    // A second push of all keys finds them all present.
    const PushResult r = table.push(keys, grads.data());
    EXPECT_EQ(r.inserted, 0u);
    EXPECT_EQ(r.applied, keys.size());
  }
}

TEST(SparseTable, ReserveAvoidsGrowth) {
  const TableSchema t = sparse_schema(UpdaterKind::kSgd, 1);
  SparseTable table(t);
  table.reserve(100000);
  const size_t reserved = table.memory_bytes();
  std::mt19937_64 rng(5);
  const std::vector<uint64_t> keys = unique_random_keys(100000, rng);
  std::vector<float> grads(keys.size(), 1.0f);
  for (size_t at = 0; at < keys.size(); at += 10000) {
    (void)table.push(std::span(keys.data() + at, 10000), grads.data() + at);
  }
  EXPECT_EQ(table.memory_bytes(), reserved);
  EXPECT_EQ(table.size(), keys.size());
}

// Keys of one server (a narrow range of mix64) still spread over every
// sub-shard: the sub-shard bits vary within a server's range.
TEST(SparseTable, OneServersKeysSpreadOverAllSubShards) {
  KeyPartition partition(1024);
  std::mt19937_64 rng(11);
  std::vector<uint64_t> keys;
  while (keys.size() < 64000) {
    const uint64_t k = rng();
    if (partition.server_of(k) == 517) keys.push_back(k);
  }
  SparseTable table(sparse_schema(UpdaterKind::kSgd, 1), 64);
  std::vector<float> grads(keys.size(), 1.0f);
  (void)table.push(keys, grads.data());
  for (size_t n : table.sub_shard_sizes()) {
    EXPECT_GT(n, 800u);
    EXPECT_LT(n, 1200u);
  }
}

// Keys that all fall into one sub-shard (bits 42..47 of mix64 pick one of
// 64, sparse_table.h) overflow the room the one-pass grouping gives each
// sub-shard, so the call is grouped again, counted first: pushes (gathered
// width-1 gradients and wider rows), repeats and pulls still match the
// reference bit for bit, alone and split over a pool.
TEST(SparseTable, KeysCrowdedIntoOneSubShardAreGroupedByCounting) {
  std::mt19937_64 rng(17);
  std::vector<uint64_t> universe;
  while (universe.size() < 3000) {
    const uint64_t k = rng();
    if (((mix64(k) >> 42) & 63) == 7) universe.push_back(k);
  }
  ApplyPool pool(2);
  for (uint32_t width : {1u, 3u}) {
    for (ApplyPool* p : {static_cast<ApplyPool*>(nullptr), &pool}) {
      const TableSchema t = sparse_schema(UpdaterKind::kAdaGrad, width, InitializerKind::kNormal);
      SparseTable table(t, 64);
      ExactRef ref(t);
      push_rounds_with_repeats(table, ref, universe, 3, 20000, rng, p);
      size_t used = 0;
      for (size_t n : table.sub_shard_sizes()) used += n > 0;
      EXPECT_EQ(used, 1u) << "the keys were to fall into one sub-shard";
      expect_same_as_ref(table, ref);
      std::vector<float> pulled(universe.size() * width);
      table.pull(universe, pulled.data(), p);
      expect_pulled_as_ref(pulled, universe, ref);
    }
  }
}

// ---- concurrency --------------------------------------------------------------

// SGD with learning rate 1 and integer gradients: every update is exact, so
// updates commute and any interleaving ends at the serial sums.
TEST(SparseTable, ConcurrentPushesEqualSerialRun) {
  for (bool overlapping : {false, true}) {
    TableSchema t = sparse_schema(UpdaterKind::kSgd, 3);
    t.updater.learning_rate = 1.0f;
    t.updater.l1 = t.updater.l2 = 0.0f;
    constexpr int kThreads = 4, kRounds = 60;
    constexpr size_t kKeysPerThread = 20000;
    std::mt19937_64 rng(overlapping ? 2 : 1);
    const std::vector<uint64_t> universe = unique_random_keys(kThreads * kKeysPerThread, rng);
    // Each thread's key set: disjoint slices, or slices of a shared pool.
    std::vector<std::vector<uint64_t>> sets(kThreads);
    for (int th = 0; th < kThreads; ++th) {
      for (size_t i = 0; i < kKeysPerThread; ++i) {
        sets[th].push_back(overlapping ? universe[(th * kKeysPerThread / 2 + i) % universe.size()]
                                       : universe[th * kKeysPerThread + i]);
      }
    }
    auto grad_of = [](int th, int round, size_t i, int c) {
      return static_cast<float>(static_cast<int>((th * 7 + round * 3 + i * 5 + c) % 17) - 8);
    };
    auto batch = [&](int th, int round, std::vector<uint64_t>& keys, std::vector<float>& grads) {
      // Round r pushes a rotating window of the thread's keys.
      keys.clear();
      grads.clear();
      for (size_t i = 0; i < kKeysPerThread / 4; ++i) {
        const size_t idx = (round * 1237 + i) % kKeysPerThread;
        keys.push_back(sets[th][idx]);
        for (int c = 0; c < 3; ++c) grads.push_back(grad_of(th, round, idx, c));
      }
    };
    SparseTable serial(t, 16), parallel(t, 16);
    std::vector<uint64_t> keys;
    std::vector<float> grads;
    for (int th = 0; th < kThreads; ++th) {
      for (int r = 0; r < kRounds; ++r) {
        batch(th, r, keys, grads);
        (void)serial.push(keys, grads.data());
      }
    }
    std::atomic<bool> done{false};
    std::atomic<size_t> short_pushes{0};
    // A puller meanwhile, so pulls run against pushes and sub-shard growths.
    std::thread puller([&] {
      std::vector<float> out(universe.size() * 3);
      while (!done.load()) parallel.pull(universe, out.data());
    });
    std::vector<std::thread> pushers;
    for (int th = 0; th < kThreads; ++th) {
      pushers.emplace_back([&, th] {
        std::vector<uint64_t> k;
        std::vector<float> g;
        for (int r = 0; r < kRounds; ++r) {
          batch(th, r, k, g);
          const PushResult res = parallel.push(k, g.data());
          if (res.applied != k.size()) short_pushes.fetch_add(1);
        }
      });
    }
    for (auto& p : pushers) p.join();
    done = true;
    puller.join();
    EXPECT_EQ(short_pushes.load(), 0u);
    ASSERT_EQ(parallel.size(), serial.size());
    EXPECT_EQ(pull_all(parallel, universe), pull_all(serial, universe)) << "overlapping=" << overlapping;
  }
}

// ---- refusals -------------------------------------------------------------------

TEST(SparseTable, NonFiniteGradientsAreRefusedAndCountedOthersApplied) {
  for (uint32_t width : {1u, 2u}) {
    const TableSchema t = sparse_schema(UpdaterKind::kAdaGrad, width);
    SparseTable table(t);
    ExactRef ref(t);
    std::mt19937_64 rng(8);
    const std::vector<uint64_t> keys = unique_random_keys(1000, rng);
    std::vector<float> grads(keys.size() * width, 0.5f);
    (void)table.push(keys, grads.data());
    (void)ref.push(keys, grads);
    const std::vector<float> before = pull_all(table, keys);
    // Now mix NaN, +-inf and overflowing (finite) gradients among ordinary ones,
    // on present keys and on absent ones.
    std::vector<uint64_t> mixed = keys;
    const std::vector<uint64_t> fresh = unique_random_keys(10, rng);
    mixed.insert(mixed.end(), fresh.begin(), fresh.end());
    std::vector<float> g(mixed.size() * width);
    for (size_t i = 0; i < g.size(); ++i) g[i] = static_cast<float>(i % 13) * 0.1f - 0.6f;
    const float bad[] = {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                         -std::numeric_limits<float>::infinity(), 3e38f};
    size_t bad_count = 0, bad_fresh = 0;
    for (size_t i = 0; i < mixed.size(); i += 37) {
      g[i * width + (i % width)] = bad[(i / 37) % 4];
      ++bad_count;
      bad_fresh += i >= keys.size() && (i / 37) % 4 != 3;
    }
    const PushResult r = table.push(mixed, g.data());
    const PushResult w = ref.push(mixed, g);
    EXPECT_EQ(r.refused_non_finite, bad_count);
    EXPECT_EQ(r.refused_non_finite, w.refused_non_finite);
    EXPECT_EQ(r.applied, mixed.size() - bad_count);
    EXPECT_EQ(r.inserted, w.inserted);
    EXPECT_EQ(table.size(), keys.size() + fresh.size() - bad_fresh);
    const std::vector<float> after = pull_all(table, keys);
    for (size_t i = 0; i < keys.size(); ++i) {
      for (uint32_t c = 0; c < width; ++c) {
        const bool refused = i % 37 == 0;
        if (refused) {
          expect_bits_equal(after[i * width + c], before[i * width + c], "refused key untouched");
        } else {
          EXPECT_NE(after[i * width + c], before[i * width + c]);
        }
        expect_bits_equal(after[i * width + c], ref.rows[keys[i]][c], "against reference");
      }
    }
  }
}

// ---- memory -----------------------------------------------------------------------

TEST(SparseTable, Width1AdaGradCostsAtMost24BytesPerKey) {
  const TableSchema t = sparse_schema(UpdaterKind::kAdaGrad, 1);
  std::mt19937_64 rng(13);
  const std::vector<uint64_t> keys = unique_random_keys(1000000, rng);
  std::vector<float> grads(keys.size(), 0.125f);
  for (bool reserved : {false, true}) {
    SparseTable table(t);
    if (reserved) table.reserve(keys.size());
    double worst = 0.0;
    for (size_t at = 0; at < keys.size(); at += 50000) {
      (void)table.push(std::span(keys.data() + at, 50000), grads.data() + at);
      // After every batch from 2x10^5 keys on (below, the fixed per-sub-shard
      // bookkeeping still shows).
      if (at + 50000 >= 200000) {
        worst = std::max(worst, static_cast<double>(table.memory_bytes()) / static_cast<double>(table.size()));
      }
    }
    ASSERT_EQ(table.size(), keys.size());
    const double per_key = static_cast<double>(table.memory_bytes()) / static_cast<double>(table.size());
    std::printf("[ memory   ] reserved=%d: %.2f bytes/key at 10^6 keys, worst %.2f while growing\n", reserved,
                per_key, worst);
    EXPECT_LE(per_key, 24.0);
    if (!reserved) {
      EXPECT_LE(worst, 24.0);  // reserved: sized for 10^6 from the start
    }
  }
}

// ---- for_each ------------------------------------------------------------------------

TEST(SparseTable, ForEachVisitsEveryKeyOnce) {
  const TableSchema t = sparse_schema(UpdaterKind::kFtrl, 2, InitializerKind::kNormal);
  SparseTable table(t, 8);
  std::mt19937_64 rng(21);
  std::vector<uint64_t> keys = unique_random_keys(50000, rng);
  keys.push_back(kSentinel);
  std::vector<float> grads(keys.size() * 2, 0.3f);
  (void)table.push(keys, grads.data());
  std::unordered_map<uint64_t, int> seen;
  const std::vector<float> values = pull_all(table, keys);
  std::unordered_map<uint64_t, size_t> index;
  for (size_t i = 0; i < keys.size(); ++i) index[keys[i]] = i;
  table.for_each([&](uint64_t key, const float* value, const float* state) {
    ++seen[key];
    const size_t i = index.at(key);
    EXPECT_EQ(value[0], values[i * 2]);
    EXPECT_EQ(value[1], values[i * 2 + 1]);
    EXPECT_GT(state[2], 0.0f);  // FTRL n = g^2 after one step
  });
  EXPECT_EQ(seen.size(), keys.size());
  for (const auto& [key, n] : seen) EXPECT_EQ(n, 1) << key;
}

TEST(SparseTable, RejectsBadConstruction) {
  TableSchema t = sparse_schema(UpdaterKind::kSgd, 1);
  EXPECT_THROW(SparseTable(t, 0), std::invalid_argument);
  EXPECT_THROW(SparseTable(t, 5000), std::invalid_argument);
  t.kind = TableKind::kDense;
  t.rows = 10;
  EXPECT_THROW(SparseTable(t, 4), std::invalid_argument);
}

// ---- measurement (prints; no timing assertions) ----------------------------------------

size_t resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  size_t pages = 0, resident = 0;
  statm >> pages >> resident;
  return resident * static_cast<size_t>(::sysconf(_SC_PAGESIZE));
}

TEST(SparseTableMeasure, AdaGradPushRateAndResidentBytesPerKey) {
  const TableSchema t = sparse_schema(UpdaterKind::kAdaGrad, 1);
  std::mt19937_64 rng(17);
  {
    // 10^5 unique random keys, already present: the push the goal names.
    SparseTable table(t);
    const std::vector<uint64_t> keys = unique_random_keys(100000, rng);
    std::vector<float> grads(keys.size());
    for (size_t i = 0; i < grads.size(); ++i) grads[i] = static_cast<float>(i % 101) / 50.0f - 1.0f;
    (void)table.push(keys, grads.data());  // inserts
    (void)table.push(keys, grads.data());  // warm-up
    std::vector<double> rates;
    for (int rep = 0; rep < 30; ++rep) {
      const auto t0 = std::chrono::steady_clock::now();
      const PushResult r = table.push(keys, grads.data());
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      ASSERT_EQ(r.applied, keys.size());
      rates.push_back(static_cast<double>(keys.size()) / s);
    }
    std::sort(rates.begin(), rates.end());
    std::printf("[ measure  ] push of 10^5 present keys, width-1 AdaGrad, one thread: median %.1f M keys/s, best %.1f M keys/s\n",
                rates[rates.size() / 2] / 1e6, rates.back() / 1e6);
    // The same keys as a pull.
    std::vector<float> out(keys.size());
    std::vector<double> pulls;
    for (int rep = 0; rep < 30; ++rep) {
      const auto t0 = std::chrono::steady_clock::now();
      table.pull(keys, out.data());
      pulls.push_back(static_cast<double>(keys.size()) /
                      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(pulls.begin(), pulls.end());
    std::printf("[ measure  ] pull of the same keys: median %.1f M keys/s\n", pulls[pulls.size() / 2] / 1e6);
  }
  {
    // Resident bytes per key for 10^7 keys, keys generated batch by batch so
    // the input arrays stay small.
    constexpr size_t kKeys = 10000000, kBatch = 100000;
    std::vector<uint64_t> keys(kBatch);
    std::vector<float> grads(kBatch, 0.5f);
    const size_t before = resident_bytes();
    SparseTable table(t);
    uint64_t next = 0x9e3779b97f4a7c15ULL;
    const auto t0 = std::chrono::steady_clock::now();
    for (size_t at = 0; at < kKeys; at += kBatch) {
      for (auto& k : keys) k = mix64(next++);  // distinct: mix64 is a bijection
      (void)table.push(keys, grads.data());
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const size_t after = resident_bytes();
    ASSERT_EQ(table.size(), kKeys);
    std::printf("[ measure  ] 10^7 width-1 AdaGrad keys: inserted at %.1f M keys/s; resident %.2f bytes/key "
                "(/proc/self/statm), memory_bytes %.2f bytes/key\n",
                kKeys / s / 1e6, static_cast<double>(after - before) / kKeys,
                static_cast<double>(table.memory_bytes()) / kKeys);
  }
}

// 2x10^8 keys on one server (about 4.5 GB): run by hand with
// --gtest_also_run_disabled_tests.
TEST(SparseTableMeasure, DISABLED_HoldsTwoHundredMillionKeys) {
  const TableSchema t = sparse_schema(UpdaterKind::kAdaGrad, 1);
  constexpr size_t kKeys = 200000000, kBatch = 1000000;
  std::vector<uint64_t> keys(kBatch);
  std::vector<float> grads(kBatch, 0.5f);
  const size_t before = resident_bytes();
  SparseTable table(t);
  uint64_t next = 1;
  const auto t0 = std::chrono::steady_clock::now();
  for (size_t at = 0; at < kKeys; at += kBatch) {
    for (auto& k : keys) k = mix64(next++);
    (void)table.push(keys, grads.data());
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_EQ(table.size(), kKeys);
  const size_t after = resident_bytes();
  // Pushes into the full table.
  for (auto& k : keys) k = mix64(1 + (k % kKeys));
  const auto t1 = std::chrono::steady_clock::now();
  const PushResult r = table.push(keys, grads.data());
  const double s1 = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
  EXPECT_EQ(r.inserted, 0u);
  std::printf("[ measure  ] 2x10^8 keys: inserted in %.1f s; resident %.2f bytes/key, memory_bytes %.2f bytes/key; "
              "10^6-key push into it %.1f M keys/s\n",
              s, static_cast<double>(after - before) / kKeys, static_cast<double>(table.memory_bytes()) / kKeys,
              kBatch / s1 / 1e6);
}

}  // namespace
}  // namespace parafab::ps
