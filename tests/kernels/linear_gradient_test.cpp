// kernels::linear_gradient, linear_margins and sigmoid against float64 host
// references, on random batches with empty rows, repeated slots, no values,
// a bias slot, and on 1 to 3 host threads (which select the kernel's fused
// atomic or privatized strategy; see linear_gradient.cpp).
#include "kernels/linear_gradient.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <ostream>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/device_array.h"
#include "kernels/memory.h"
#include "parafab/config.h"
#include "tests/kernels/kernel_test_util.h"

namespace parafab::kernels {
namespace {

using testing::BatchSpec;
using testing::DeviceBatch;
using testing::HostBatch;
using testing::kFloatU;

// The float64 gradient, margins and mean loss, each with an error bound for
// the kernel's float32 arithmetic:
//  - a term t = d_i x_k / n carries the relative error of d_i, which is at
//    most the margin's absolute error dm_i (|d'/d| <= 1 for the logistic; the
//    hinge's d is exact) plus a few roundings (exp, division, 1/n, product):
//    (dm_i + 8u) |t|;
//  - slot j sums its c_j terms and l2 w_j recursively, possibly split over up
//    to 32 partial sums that are added at the end: (c_j + 34) u sum |t|
//    (Higham, Accuracy and Stability of Numerical Algorithms, eq. 4.4);
//  - the mean loss: |dl/dm| <= 1, so dm_i plus 4u of each loss.
// Every bound is then doubled, which still flags one lost or doubled term.
struct Reference {
  std::vector<double> grad;
  std::vector<double> grad_tol;
  std::vector<double> margins;
  std::vector<double> margin_tol;
  double loss = 0.0;
  double loss_tol = 0.0;
};

Reference reference(Loss loss, const HostBatch& b, const std::vector<float>& w, float l2) {
  const size_t n_slots = w.size();
  Reference r;
  r.grad.assign(n_slots, 0.0);
  std::vector<double> abs_sum(n_slots, 0.0);
  std::vector<double> term_err(n_slots, 0.0);
  std::vector<double> count(n_slots, 0.0);
  const int64_t n = b.n_rows();
  for (int64_t i = 0; i < n; ++i) {
    double dm = 0.0;
    const double m = testing::margin(b, w, i, &dm);
    r.margins.push_back(m);
    r.margin_tol.push_back(2.0 * (dm + kFloatU * std::fabs(m)) + 1e-30);
    double l = 0.0;
    double d = 0.0;
    testing::loss_and_derivative(loss, testing::label_sign(b.labels[static_cast<size_t>(i)]), m, &l,
                                 &d);
    r.loss += l;
    r.loss_tol += dm + 4.0 * kFloatU * l;
    d /= static_cast<double>(n);
    auto add = [&](size_t j, double x) {
      const double t = d * x;
      r.grad[j] += t;
      abs_sum[j] += std::fabs(t);
      term_err[j] += (dm + 8.0 * kFloatU) * std::fabs(t);
      count[j] += 1.0;
    };
    for (uint64_t k = b.row_ptr[static_cast<size_t>(i)]; k < b.row_ptr[static_cast<size_t>(i) + 1];
         ++k) {
      add(b.cols[k], b.value(k));
    }
    if (b.bias_slot >= 0) add(static_cast<size_t>(b.bias_slot), 1.0);
  }
  r.grad_tol.resize(n_slots);
  for (size_t j = 0; j < n_slots; ++j) {
    const double reg = static_cast<double>(l2) * static_cast<double>(w[j]);
    r.grad[j] += reg;
    abs_sum[j] += std::fabs(reg);
    r.grad_tol[j] = 2.0 * (term_err[j] + (count[j] + 34.0) * kFloatU * abs_sum[j]) + 1e-30;
  }
  if (n > 0) {
    r.loss /= static_cast<double>(n);
    r.loss_tol = 2.0 * r.loss_tol / static_cast<double>(n) + 1e-12;
  }
  return r;
}

// True when no row's hinge margin y m lies so close to 1 that float32 and
// float64 could disagree on the subgradient.
bool hinge_safe(const HostBatch& b, const std::vector<float>& w) {
  for (int64_t i = 0; i < b.n_rows(); ++i) {
    double dm = 0.0;
    const double z =
        testing::label_sign(b.labels[static_cast<size_t>(i)]) * testing::margin(b, w, i, &dm);
    if (std::fabs(z - 1.0) <= 4.0 * dm + 1e-6) return false;
  }
  return true;
}

std::vector<float> weights_for(Loss loss, const HostBatch& b, int64_t slots, double scale,
                               uint64_t seed) {
  for (uint64_t s = seed;; ++s) {
    std::vector<float> w = testing::random_weights(slots, scale, s);
    if (loss != Loss::kHinge || hinge_safe(b, w)) return w;
  }
}

void expect_gradient(Loss loss, const HostBatch& hb, const std::vector<float>& w, float l2,
                     const std::string& what) {
  const Reference ref = reference(loss, hb, w, l2);
  const DeviceBatch db(hb);
  const auto n_slots = static_cast<int64_t>(w.size());
  const DeviceArray<float> dw(w);
  // Poison grad and margins: the kernel must overwrite every entry.
  DeviceArray<float> grad(std::vector<float>(w.size(), std::numeric_limits<float>::quiet_NaN()));
  DeviceArray<float> margins(std::vector<float>(static_cast<size_t>(hb.n_rows()),
                                                std::numeric_limits<float>::quiet_NaN()));
  const double got_loss =
      linear_gradient(loss, db.batch(), dw.data(), n_slots, l2, grad.data(), margins.data());
  EXPECT_NEAR(got_loss, ref.loss, ref.loss_tol) << what;
  const std::vector<float> g = grad.to_host();
  int bad = 0;
  for (size_t j = 0; j < g.size() && bad < 5; ++j) {
    if (!(std::fabs(static_cast<double>(g[j]) - ref.grad[j]) <= ref.grad_tol[j])) {
      ++bad;
      ADD_FAILURE() << what << ": grad[" << j << "] = " << g[j] << ", want " << ref.grad[j]
                    << " +- " << ref.grad_tol[j];
    }
  }
  const std::vector<float> m = margins.to_host();
  for (size_t i = 0; i < m.size() && bad < 5; ++i) {
    if (!(std::fabs(static_cast<double>(m[i]) - ref.margins[i]) <= ref.margin_tol[i])) {
      ++bad;
      ADD_FAILURE() << what << ": margin[" << i << "] = " << m[i] << ", want " << ref.margins[i];
    }
  }
}

struct Shape {
  const char* name;
  int64_t rows;
  int64_t slots;
  int max_nnz;
};

// Few slots: many repeats within and across rows (the privatized strategy);
// many slots per nonzero: the fused atomic strategy on 2 and 3 threads.
// large: many blocks of the privatized strategy per range; long_rows: rows
// longer than a block (kBlockNnz), each then a block of its own.
constexpr Shape kShapes[] = {
    // one_slot with a bias: the bias is the only slot, every row is empty.
    {"no_rows", 0, 17, 8},           {"one_row", 1, 5, 6},      {"all_empty", 50, 9, 0},
    {"one_slot", 40, 1, 5},          {"few_slots", 300, 7, 12}, {"medium", 1000, 500, 20},
    {"many_slots", 200, 100000, 10}, {"large", 6000, 3000, 40}, {"long_rows", 12, 2000, 9000},
};

void PrintTo(const Shape& s, std::ostream* os) { *os << s.name; }

using Param = std::tuple<Shape, Loss, bool /*vals*/, bool /*bias*/>;

class LinearGradientTest : public ::testing::TestWithParam<Param> {
 protected:
  void TearDown() override { set_host_threads(2); }
};

TEST_P(LinearGradientTest, MatchesFloat64Reference) {
  const auto& [shape, loss, vals, bias] = GetParam();
  BatchSpec spec;
  spec.rows = shape.rows;
  spec.slots = shape.slots;
  spec.max_nnz = shape.max_nnz;
  spec.with_vals = vals;
  spec.with_bias = bias;
  spec.seed = static_cast<uint64_t>(shape.rows * 31 + shape.slots);
  const HostBatch hb = testing::random_batch(spec);
  const std::vector<float> w = weights_for(loss, hb, shape.slots, 0.3, spec.seed + 7);
  for (const int threads : {1, 2, 3}) {
    set_host_threads(threads);
    for (const float l2 : {0.0f, 0.01f}) {
      expect_gradient(loss, hb, w, l2,
                      std::string(shape.name) + " threads=" + std::to_string(threads) +
                          " l2=" + std::to_string(l2));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, LinearGradientTest,
                         ::testing::Combine(::testing::ValuesIn(kShapes),
                                            ::testing::Values(Loss::kLogistic, Loss::kHinge),
                                            ::testing::Bool(), ::testing::Bool()),
                         [](const ::testing::TestParamInfo<Param>& info) {
                           return std::string(std::get<0>(info.param).name) +
                                  (std::get<1>(info.param) == Loss::kLogistic ? "_logistic"
                                                                              : "_hinge") +
                                  (std::get<2>(info.param) ? "_vals" : "_ones") +
                                  (std::get<3>(info.param) ? "_bias" : "_nobias");
                         });

TEST(LinearGradient, EmptyBatchGivesL2TimesWeightsAndZeroLoss) {
  const std::vector<float> w = testing::random_weights(33, 2.0, 3);
  const DeviceArray<float> dw(w);
  DeviceArray<float> grad(w.size());
  const DeviceArray<uint64_t> row_ptr(std::vector<uint64_t>{0});
  const CsrBatch empty{row_ptr.data(), nullptr, nullptr, nullptr, 0, -1};
  EXPECT_EQ(linear_gradient(Loss::kLogistic, empty, dw.data(), 33, 0.25f, grad.data(), nullptr),
            0.0);
  const std::vector<float> g = grad.to_host();
  for (size_t j = 0; j < w.size(); ++j) EXPECT_EQ(g[j], 0.25f * w[j]) << j;
}

TEST(LinearGradient, LogisticIsFiniteAtExtremeMargins) {
  // One nonzero per row, weight +-1e4: margins of +-1e4 and +-1e4 * 3.
  HostBatch hb;
  hb.cols = {0, 0, 1, 1};
  hb.vals = {1.0f, 1.0f, 3.0f, -3.0f};
  hb.row_ptr = {0, 1, 2, 3, 4};
  hb.labels = {1.0f, 0.0f, 1.0f, 1.0f};
  const std::vector<float> w{1e4f, -1e4f};
  const DeviceBatch db(hb);
  const DeviceArray<float> dw(w);
  DeviceArray<float> grad(2);
  const double loss =
      linear_gradient(Loss::kLogistic, db.batch(), dw.data(), 2, 0.0f, grad.data(), nullptr);
  // Rows: y m = 1e4 (loss ~0), -1e4 (1e4), -3e4 (3e4), 3e4 (~0).
  EXPECT_NEAR(loss, (1e4 + 3e4) / 4.0, 1e-2);
  const std::vector<float> g = grad.to_host();
  // d = -y sigmoid(-y m): row 1 (y = -1, m = 1e4): +1; row 2 (y = 1, m = -3e4): -1.
  EXPECT_NEAR(g[0], (1.0 * 1.0) / 4.0, 1e-6);
  EXPECT_NEAR(g[1], (-1.0 * 3.0) / 4.0, 1e-6);
}

TEST(LinearGradient, BiasSlotOutsideTheSlotsThrows) {
  const DeviceArray<uint64_t> row_ptr(std::vector<uint64_t>{0});
  const CsrBatch b{row_ptr.data(), nullptr, nullptr, nullptr, 0, 4};
  DeviceArray<float> w(4);
  DeviceArray<float> grad(4);
  EXPECT_THROW((void)linear_gradient(Loss::kHinge, b, w.data(), 4, 0.0f, grad.data(), nullptr),
               std::invalid_argument);
}

TEST(LinearMargins, MatchReference) {
  for (const bool bias : {false, true}) {
    for (const bool vals : {false, true}) {
      BatchSpec spec;
      spec.rows = 500;
      spec.slots = 40;
      spec.with_bias = bias;
      spec.with_vals = vals;
      spec.seed = 11;
      const HostBatch hb = testing::random_batch(spec);
      const std::vector<float> w = testing::random_weights(spec.slots, 1.0, 12);
      const DeviceBatch db(hb);
      const DeviceArray<float> dw(w);
      DeviceArray<float> out(static_cast<size_t>(spec.rows));
      linear_margins(db.batch(), dw.data(), out.data());
      const std::vector<float> m = out.to_host();
      for (int64_t i = 0; i < spec.rows; ++i) {
        double dm = 0.0;
        const double want = testing::margin(hb, w, i, &dm);
        EXPECT_NEAR(m[static_cast<size_t>(i)], want, 2.0 * dm + 1e-30) << "row " << i;
      }
    }
  }
}

TEST(Sigmoid, StableAndAccurateForAnyMargin) {
  const std::vector<float> m{-std::numeric_limits<float>::infinity(),
                             -1e30f,
                             -1e4f,
                             -100.0f,
                             -87.0f,
                             -20.0f,
                             -1.0f,
                             -1e-8f,
                             0.0f,
                             1e-8f,
                             1.0f,
                             20.0f,
                             88.0f,
                             100.0f,
                             1e4f,
                             1e30f,
                             std::numeric_limits<float>::infinity()};
  const DeviceArray<float> dm(m);
  DeviceArray<float> out(m.size());
  sigmoid(dm.data(), static_cast<int64_t>(m.size()), out.data());
  const std::vector<float> p = out.to_host();
  for (size_t i = 0; i < m.size(); ++i) {
    const double x = static_cast<double>(m[i]);
    const double want = x >= 0 ? 1.0 / (1.0 + std::exp(-x)) : std::exp(x) / (1.0 + std::exp(x));
    ASSERT_FALSE(std::isnan(p[i])) << "m = " << m[i];
    EXPECT_GE(p[i], 0.0f);
    EXPECT_LE(p[i], 1.0f);
    // A few ulps where float has normal numbers; below, denormal spacing.
    // CUDA's expf may be 2 ulp off (glibc's: under 1), and for m << 0 the
    // result is about expf's: 8 there, 4 on the host.
    const double ulps = PARAFAB_CUDA ? 8.0 : 4.0;
    EXPECT_NEAR(p[i], want, ulps * kFloatU * want + 1e-44) << "m = " << m[i];
  }
  sigmoid(dm.data(), 0, out.data());  // n == 0: nothing to do
}

}  // namespace
}  // namespace parafab::kernels
