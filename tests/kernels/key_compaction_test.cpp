// kernels::compact_keys against a std::map reference: keys ascending and
// unique, each row the sum of its duplicates' rows.
#include "kernels/key_compaction.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <map>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/device_array.h"

namespace parafab::kernels {
namespace {

struct Case {
  size_t n;
  uint64_t distinct;  // keys drawn from this many values (0: all equal)
  int width;
};

// The float64 sums, and for each the sum of magnitudes and number of terms.
// Tolerance of a float32 recursive sum of c terms: (c - 1) u sum |v|
// (Higham, eq. 4.4); we allow twice that plus a denormal.
void check(const Case& c, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint64_t> keys(c.n);
  // Spread keys over the whole 64-bit range so sorting sees high bits too.
  for (auto& k : keys) {
    const uint64_t r = c.distinct == 0 ? 0 : rng() % c.distinct;
    k = r * 0x9E3779B97F4A7C15ULL;
  }
  std::vector<float> vals(c.n * static_cast<size_t>(c.width));
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  for (auto& v : vals) v = static_cast<float>(u(rng));

  struct Acc {
    std::vector<double> sum;
    std::vector<double> mag;
    double count = 0.0;
  };
  std::map<uint64_t, Acc> ref;
  for (size_t i = 0; i < c.n; ++i) {
    Acc& a = ref[keys[i]];
    a.sum.resize(static_cast<size_t>(c.width), 0.0);
    a.mag.resize(static_cast<size_t>(c.width), 0.0);
    a.count += 1.0;
    for (int col = 0; col < c.width; ++col) {
      const double v = vals[i * static_cast<size_t>(c.width) + static_cast<size_t>(col)];
      a.sum[static_cast<size_t>(col)] += v;
      a.mag[static_cast<size_t>(col)] += std::fabs(v);
    }
  }

  const DeviceArray<uint64_t> dk(keys);
  const DeviceArray<float> dv(vals);
  DeviceArray<uint64_t> ok(c.n);
  DeviceArray<float> ov(vals.size());
  const size_t u_count = compact_keys(dk.data(), dv.data(), c.n, c.width, ok.data(), ov.data());
  const std::string what = "n=" + std::to_string(c.n) + " distinct=" + std::to_string(c.distinct) +
                           " width=" + std::to_string(c.width);
  ASSERT_EQ(u_count, ref.size()) << what;
  const std::vector<uint64_t> got_keys = ok.to_host();
  const std::vector<float> got_vals = ov.to_host();
  size_t k = 0;
  int bad = 0;
  for (const auto& [key, a] : ref) {
    ASSERT_EQ(got_keys[k], key) << what << " at " << k;
    for (int col = 0; col < c.width && bad < 5; ++col) {
      const double got = got_vals[k * static_cast<size_t>(c.width) + static_cast<size_t>(col)];
      const double tol =
          2.0 * (a.count - 1.0) * 0x1.0p-24 * a.mag[static_cast<size_t>(col)] + 1e-38;
      if (!(std::fabs(got - a.sum[static_cast<size_t>(col)]) <= tol)) {
        ++bad;
        ADD_FAILURE() << what << ": key " << key << " column " << col << " = " << got << ", want "
                      << a.sum[static_cast<size_t>(col)];
      }
    }
    ++k;
  }
  // The inputs are untouched.
  EXPECT_EQ(dk.to_host(), keys) << what;
  EXPECT_EQ(dv.to_host(), vals) << what;
}

void PrintTo(const Case& c, std::ostream* os) {
  *os << "n=" << c.n << " distinct=" << c.distinct << " width=" << c.width;
}

class CompactKeysTest : public ::testing::TestWithParam<Case> {};

TEST_P(CompactKeysTest, MatchesMapReference) { check(GetParam(), 1234 + GetParam().n); }

INSTANTIATE_TEST_SUITE_P(
    Cases, CompactKeysTest,
    ::testing::Values(Case{1, 1, 1}, Case{1, 1, 5}, Case{2, 1, 1}, Case{10, 0, 1}, Case{1000, 0, 1},
                      Case{1000, 0, 7}, Case{500, 1000000, 1}, Case{500, 1000000, 3},
                      Case{5000, 40, 1}, Case{5000, 40, 16}, Case{20000, 3000, 1},
                      Case{20000, 3000, 4}, Case{100000, 1 << 20, 1}, Case{65537, 2, 2}),
    [](const ::testing::TestParamInfo<Case>& info) {
      // A stream, not string operator+: GCC 12 at -O3 warns falsely (-Wrestrict) on the latter.
      std::ostringstream name;
      name << "n" << info.param.n << "_distinct" << info.param.distinct << "_w" << info.param.width;
      return name.str();
    });

TEST(CompactKeys, EmptyInputGivesZero) {
  EXPECT_EQ(compact_keys(nullptr, nullptr, 0, 1, nullptr, nullptr), 0u);
  EXPECT_EQ(compact_keys(nullptr, nullptr, 0, 8, nullptr, nullptr), 0u);
}

TEST(CompactKeys, ExtremeKeysSortUnsigned) {
  const std::vector<uint64_t> keys{~uint64_t{0}, 0, uint64_t{1} << 63, ~uint64_t{0}, 0};
  const std::vector<float> vals{1.0f, 2.0f, 3.0f, 4.0f, 5.0f};
  const DeviceArray<uint64_t> dk(keys);
  const DeviceArray<float> dv(vals);
  DeviceArray<uint64_t> ok(keys.size());
  DeviceArray<float> ov(vals.size());
  ASSERT_EQ(compact_keys(dk.data(), dv.data(), keys.size(), 1, ok.data(), ov.data()), 3u);
  const std::vector<uint64_t> k = ok.to_host();
  const std::vector<float> v = ov.to_host();
  EXPECT_EQ(k[0], 0u);
  EXPECT_EQ(k[1], uint64_t{1} << 63);
  EXPECT_EQ(k[2], ~uint64_t{0});
  EXPECT_EQ(v[0], 7.0f);
  EXPECT_EQ(v[1], 3.0f);
  EXPECT_EQ(v[2], 5.0f);
}

TEST(CompactKeys, RejectsWidthBelowOne) {
  uint64_t key = 1;
  float val = 1.0f;
  EXPECT_THROW((void)compact_keys(&key, &val, 1, 0, &key, &val), std::invalid_argument);
}

}  // namespace
}  // namespace parafab::kernels
