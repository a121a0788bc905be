// kernels::log_loss, roc_auc and accuracy against float64 host references,
// with ties, one-class inputs and extreme probabilities.
#include "kernels/metrics.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kernels/device_array.h"

namespace parafab::kernels {
namespace {

double ref_log_loss(const std::vector<float>& p, const std::vector<float>& y) {
  double s = 0.0;
  for (size_t i = 0; i < p.size(); ++i) {
    const double q = std::clamp(static_cast<double>(p[i]), 1e-15, 1.0 - 1e-15);
    s += y[i] > 0.5f ? -std::log(q) : -std::log(1.0 - q);
  }
  return s / static_cast<double>(p.size());
}

// Pairwise definition, O(n^2): positives above negatives, ties one half.
double ref_auc(const std::vector<float>& s, const std::vector<float>& y) {
  double u = 0.0;
  double pos = 0.0;
  double neg = 0.0;
  for (size_t i = 0; i < s.size(); ++i) {
    if (y[i] > 0.5f) {
      pos += 1.0;
    } else {
      neg += 1.0;
    }
  }
  for (size_t i = 0; i < s.size(); ++i) {
    if (!(y[i] > 0.5f)) continue;
    for (size_t j = 0; j < s.size(); ++j) {
      if (y[j] > 0.5f) continue;
      u += s[i] > s[j] ? 1.0 : (s[i] == s[j] ? 0.5 : 0.0);
    }
  }
  return u / (pos * neg);
}

double auc(const std::vector<float>& s, const std::vector<float>& y) {
  const DeviceArray<float> ds(s);
  const DeviceArray<float> dy(y);
  return roc_auc(ds.data(), dy.data(), s.size());
}

TEST(LogLoss, MatchesReferenceAndClipsExtremes) {
  std::mt19937_64 rng(3);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  for (const size_t n : {1, 2, 17, 1000, 50000}) {
    std::vector<float> p(n);
    std::vector<float> y(n);
    for (size_t i = 0; i < n; ++i) {
      p[i] = static_cast<float>(u(rng));
      y[i] = u(rng) < 0.3 ? 1.0f : 0.0f;
    }
    // Exact 0 and 1, wrong and right: clipped to 1e-15, so -log gives ~34.5.
    p[0] = 0.0f;
    if (n > 1) p[1] = 1.0f;
    const DeviceArray<float> dp(p);
    const DeviceArray<float> dy(y);
    const double got = log_loss(dp.data(), dy.data(), n);
    // Terms are computed in double from the float inputs; only the order of
    // the n additions differs from the reference: n u_double relative.
    EXPECT_NEAR(got, ref_log_loss(p, y), 1e-12 * std::max(1.0, ref_log_loss(p, y))) << n;
    EXPECT_TRUE(std::isfinite(got));
  }
  EXPECT_EQ(log_loss(nullptr, nullptr, 0), 0.0);
}

TEST(RocAuc, MatchesPairwiseDefinition) {
  std::mt19937_64 rng(5);
  for (const size_t n : {2, 3, 10, 257, 2000}) {
    for (const int levels : {2, 5, 1000000}) {  // few levels: many ties
      std::vector<float> s(n);
      std::vector<float> y(n);
      for (size_t i = 0; i < n; ++i) {
        y[i] = rng() % 3 == 0 ? 1.0f : 0.0f;
        s[i] =
            static_cast<float>(rng() % static_cast<uint64_t>(levels)) / 7.0f - 3.0f + 0.2f * y[i];
      }
      y[0] = 1.0f;  // both classes present
      y[1] = 0.0f;
      // U is a sum of halves: exact in double; only the final division rounds.
      EXPECT_NEAR(auc(s, y), ref_auc(s, y), 1e-12) << "n=" << n << " levels=" << levels;
    }
  }
}

TEST(RocAuc, TiesCountOneHalf) {
  EXPECT_DOUBLE_EQ(auc({0.5f, 0.5f}, {1.0f, 0.0f}), 0.5);
  EXPECT_DOUBLE_EQ(auc({0.5f, 0.5f, 0.5f, 0.5f}, {1.0f, 0.0f, 1.0f, 0.0f}), 0.5);
  // Positive above one negative, tied with another: (1 + 0.5) / 2.
  EXPECT_DOUBLE_EQ(auc({0.9f, 0.1f, 0.9f}, {1.0f, 0.0f, 0.0f}), 0.75);
  // -0 and +0 are the same score.
  EXPECT_DOUBLE_EQ(auc({-0.0f, 0.0f}, {1.0f, 0.0f}), 0.5);
}

TEST(RocAuc, PerfectAndReversed) {
  std::vector<float> s(100);
  std::vector<float> y(100);
  for (size_t i = 0; i < s.size(); ++i) {
    s[i] = static_cast<float>(i);
    y[i] = i >= 60 ? 1.0f : 0.0f;
  }
  EXPECT_DOUBLE_EQ(auc(s, y), 1.0);
  for (auto& v : s) v = -v;
  EXPECT_DOUBLE_EQ(auc(s, y), 0.0);
}

TEST(RocAuc, NaNWithoutBothClasses) {
  EXPECT_TRUE(std::isnan(roc_auc(nullptr, nullptr, 0)));
  EXPECT_TRUE(std::isnan(auc({0.1f, 0.7f, 0.3f}, {1.0f, 1.0f, 1.0f})));
  EXPECT_TRUE(std::isnan(auc({0.1f, 0.7f, 0.3f}, {0.0f, 0.0f, 0.0f})));
  EXPECT_TRUE(std::isnan(auc({0.4f}, {1.0f})));
}

TEST(Accuracy, MatchesReference) {
  std::mt19937_64 rng(8);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  for (const size_t n : {1, 9, 1000, 30001}) {
    std::vector<float> s(n);
    std::vector<float> y(n);
    for (size_t i = 0; i < n; ++i) {
      s[i] = static_cast<float>(u(rng));
      y[i] = u(rng) + 0.5 * s[i] > 0 ? 1.0f : 0.0f;
    }
    s[0] = 0.25f;  // exactly at the threshold: counts as predicted positive
    for (const float threshold : {0.0f, 0.25f}) {
      size_t correct = 0;
      for (size_t i = 0; i < n; ++i) correct += (s[i] >= threshold) == (y[i] > 0.5f) ? 1 : 0;
      const DeviceArray<float> ds(s);
      const DeviceArray<float> dy(y);
      EXPECT_DOUBLE_EQ(accuracy(ds.data(), dy.data(), n, threshold),
                       static_cast<double>(correct) / static_cast<double>(n))
          << n;
    }
  }
  EXPECT_TRUE(std::isnan(accuracy(nullptr, nullptr, 0, 0.5f)));
}

}  // namespace
}  // namespace parafab::kernels
