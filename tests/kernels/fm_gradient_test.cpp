// kernels::fm_gradient and fm_margins against a float64 host reference, on
// random batches with empty rows, repeated slots, no values, a bias slot, for
// several k and on 1 to 3 host threads (which select the kernel's fused atomic
// or privatized strategy; see fm_gradient.cpp). The reference itself is
// checked against central finite differences and the pairwise definition of
// the FM margin, and k = 0 against linear_gradient.
#include "kernels/fm_gradient.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <ostream>
#include <random>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/device_array.h"
#include "kernels/linear_gradient.h"
#include "kernels/memory.h"
#include "tests/kernels/kernel_test_util.h"

namespace parafab::kernels {
namespace {

using testing::BatchSpec;
using testing::DeviceBatch;
using testing::HostBatch;
using testing::kFloatU;

// w_j uniform in [-w_scale, w_scale], v_jf in [-v_scale, v_scale], all
// distinct, laid out as the kernel reads them: 1 + k floats per slot.
std::vector<float> fm_params(int64_t n_slots, int k, double w_scale, double v_scale,
                             uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  std::vector<float> p;
  for (int64_t j = 0; j < n_slots; ++j) {
    p.push_back(static_cast<float>(w_scale * u(rng)));
    for (int f = 0; f < k; ++f) p.push_back(static_cast<float>(v_scale * u(rng)));
  }
  return p;
}

std::vector<double> to_double(const std::vector<float>& v) { return {v.begin(), v.end()}; }

// One row in double: m, S_f, and the magnitudes the error bounds scale with.
struct Row {
  double m = 0.0;
  double mag = 0.0;  // sum |x w| + |bias| + (sum_f Sabs_f^2 + Q) / 2
  std::vector<double> s;
  std::vector<double> s_abs;  // sum |x v_f|
  uint64_t len = 0;
};

Row row_terms(const HostBatch& b, const std::vector<double>& p, int k, int64_t i) {
  const auto width = static_cast<size_t>(k) + 1;
  Row r;
  r.s.assign(static_cast<size_t>(k), 0.0);
  r.s_abs.assign(static_cast<size_t>(k), 0.0);
  double lin = 0.0;
  double lin_abs = 0.0;
  double q = 0.0;
  const uint64_t begin = b.row_ptr[static_cast<size_t>(i)];
  const uint64_t end = b.row_ptr[static_cast<size_t>(i) + 1];
  r.len = end - begin;
  for (uint64_t e = begin; e < end; ++e) {
    const double x = b.value(e);
    const double* ps = &p[b.cols[e] * width];
    lin += x * ps[0];
    lin_abs += std::fabs(x * ps[0]);
    for (size_t f = 0; f < static_cast<size_t>(k); ++f) {
      const double t = x * ps[1 + f];
      r.s[f] += t;
      r.s_abs[f] += std::fabs(t);
      q += t * t;
    }
  }
  double ss = 0.0;
  double ss_abs = 0.0;
  for (size_t f = 0; f < static_cast<size_t>(k); ++f) {
    ss += r.s[f] * r.s[f];
    ss_abs += r.s_abs[f] * r.s_abs[f];
  }
  r.m = lin + 0.5 * (ss - q);
  r.mag = lin_abs + 0.5 * (ss_abs + q);
  if (b.bias_slot >= 0) {
    const double bias = p[static_cast<size_t>(b.bias_slot) * width];
    r.m += bias;
    r.mag += std::fabs(bias);
  }
  return r;
}

// The float64 gradient, margins and mean loss, each with an error bound for
// the kernel's float32 arithmetic (first order in u, then doubled, which still
// flags one lost or doubled term):
//  - the margin: S_f carries (len + 1) u Sabs_f, so S_f^2 carries
//    (2 len + 3) u Sabs_f^2; their sum over f adds k u, Q (summed per nonzero,
//    then over nonzeros) (len + k + 1) u Q, the linear part (len + 1) u:
//    dm = (2 len + k + 6) u mag;
//  - a term t = d_i g / n carries the relative error of d_i, at most dm_i for
//    the logistic (|d'/d| <= 1), plus a few roundings: (dm_i + 8u) |t|; for
//    a factor g = x (S_f - v_f x) is itself computed from S_f:
//    |d_i x| / n (len + 3) u (Sabs_f + |v_f x|) more;
//  - parameter p sums its c_p terms and l2 p recursively, possibly split
//    over up to 32 partial sums added at the end: (c_p + 34) u sum |t|
//    (Higham, Accuracy and Stability of Numerical Algorithms, eq. 4.4);
//  - the mean loss: |dl/dm| <= 1, so dm_i plus 4u of each loss.
struct Reference {
  std::vector<double> grad;
  std::vector<double> grad_tol;
  std::vector<double> margins;
  std::vector<double> margin_tol;
  double loss = 0.0;
  double loss_tol = 0.0;
};

Reference reference(const HostBatch& b, const std::vector<double>& p, int k, double l2) {
  const size_t width = static_cast<size_t>(k) + 1;
  const size_t n_params = p.size();
  Reference r;
  r.grad.assign(n_params, 0.0);
  std::vector<double> abs_sum(n_params, 0.0);
  std::vector<double> term_err(n_params, 0.0);
  std::vector<double> count(n_params, 0.0);
  const int64_t n = b.n_rows();
  for (int64_t i = 0; i < n; ++i) {
    const Row row = row_terms(b, p, k, i);
    const double dm =
        static_cast<double>(2 * row.len + static_cast<uint64_t>(k) + 6) * kFloatU * row.mag;
    r.margins.push_back(row.m);
    r.margin_tol.push_back(2.0 * dm + 1e-30);
    double l = 0.0;
    double d = 0.0;
    testing::loss_and_derivative(Loss::kLogistic,
                                 testing::label_sign(b.labels[static_cast<size_t>(i)]), row.m, &l,
                                 &d);
    r.loss += l;
    r.loss_tol += dm + 4.0 * kFloatU * l;
    d /= static_cast<double>(n);
    auto add = [&](size_t at, double g, double extra_err) {
      const double t = d * g;
      r.grad[at] += t;
      abs_sum[at] += std::fabs(t);
      term_err[at] += (dm + 8.0 * kFloatU) * std::fabs(t) + extra_err;
      count[at] += 1.0;
    };
    const double g_err = static_cast<double>(row.len + 3) * kFloatU;
    for (uint64_t e = b.row_ptr[static_cast<size_t>(i)]; e < b.row_ptr[static_cast<size_t>(i) + 1];
         ++e) {
      const double x = b.value(e);
      const size_t base = b.cols[e] * width;
      add(base, x, 0.0);
      for (size_t f = 0; f < static_cast<size_t>(k); ++f) {
        const double vx = p[base + 1 + f] * x;
        add(base + 1 + f, x * (row.s[f] - vx),
            std::fabs(d * x) * g_err * (row.s_abs[f] + std::fabs(vx)));
      }
    }
    if (b.bias_slot >= 0) add(static_cast<size_t>(b.bias_slot) * width, 1.0, 0.0);
  }
  r.grad_tol.resize(n_params);
  for (size_t j = 0; j < n_params; ++j) {
    const double reg = l2 * p[j];
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

// Compares the kernel with the reference; returns the kernel's gradient.
std::vector<float> expect_gradient(const HostBatch& hb, const std::vector<float>& params, int k,
                                   float l2, const std::string& what, bool with_margins = true) {
  const Reference ref = reference(hb, to_double(params), k, static_cast<double>(l2));
  const DeviceBatch db(hb);
  const auto n_slots = static_cast<int64_t>(params.size() / (static_cast<size_t>(k) + 1));
  const DeviceArray<float> dp(params);
  // Poison grad and margins: the kernel must overwrite every entry.
  DeviceArray<float> grad(
      std::vector<float>(params.size(), std::numeric_limits<float>::quiet_NaN()));
  DeviceArray<float> margins(std::vector<float>(static_cast<size_t>(hb.n_rows()),
                                                std::numeric_limits<float>::quiet_NaN()));
  const double got_loss = fm_gradient(db.batch(), dp.data(), n_slots, k, l2, grad.data(),
                                      with_margins ? margins.data() : nullptr);
  EXPECT_NEAR(got_loss, ref.loss, ref.loss_tol) << what;
  const std::vector<float> g = grad.to_host();
  int bad = 0;
  for (size_t j = 0; j < g.size() && bad < 5; ++j) {
    if (!(std::fabs(static_cast<double>(g[j]) - ref.grad[j]) <= ref.grad_tol[j])) {
      ++bad;
      ADD_FAILURE() << what << ": grad[" << j << "] (slot " << j / (static_cast<size_t>(k) + 1)
                    << ", entry " << j % (static_cast<size_t>(k) + 1) << ") = " << g[j]
                    << ", want " << ref.grad[j] << " +- " << ref.grad_tol[j];
    }
  }
  if (with_margins) {
    const std::vector<float> m = margins.to_host();
    for (size_t i = 0; i < m.size() && bad < 5; ++i) {
      if (!(std::fabs(static_cast<double>(m[i]) - ref.margins[i]) <= ref.margin_tol[i])) {
        ++bad;
        ADD_FAILURE() << what << ": margin[" << i << "] = " << m[i] << ", want "
                      << ref.margins[i] << " +- " << ref.margin_tol[i];
      }
    }
  }
  return g;
}

struct Shape {
  const char* name;
  int64_t rows;
  int64_t slots;
  int max_nnz;
};

// Few slots: many repeats within and across rows (the privatized strategy);
// many slots per nonzero: the fused atomic strategy on 2 and 3 threads;
// long_rows: few rows, so the ranges of the privatized strategy are uneven
// and some are empty.
constexpr Shape kShapes[] = {
    // one_slot with a bias: the bias is the only slot, every row is empty.
    {"no_rows", 0, 17, 8},          {"one_row", 1, 5, 6},      {"all_empty", 50, 9, 0},
    {"one_slot", 40, 1, 5},         {"few_slots", 300, 7, 12}, {"medium", 1000, 500, 20},
    {"many_slots", 200, 50000, 10}, {"large", 6000, 3000, 40}, {"long_rows", 5, 2000, 400},
};

void PrintTo(const Shape& s, std::ostream* os) { *os << s.name; }

using Param = std::tuple<Shape, int /*k*/, bool /*vals*/, bool /*bias*/>;

class FmGradientTest : public ::testing::TestWithParam<Param> {
 protected:
  void TearDown() override { set_host_threads(2); }
};

TEST_P(FmGradientTest, MatchesFloat64Reference) {
  const auto& [shape, k, vals, bias] = GetParam();
  BatchSpec spec;
  spec.rows = shape.rows;
  spec.slots = shape.slots;
  spec.max_nnz = shape.max_nnz;
  spec.with_vals = vals;
  spec.with_bias = bias;
  spec.seed = static_cast<uint64_t>(shape.rows * 31 + shape.slots + k);
  const HostBatch hb = testing::random_batch(spec);
  const std::vector<float> params = fm_params(shape.slots, k, 0.3, 0.1, spec.seed + 7);
  for (const int threads : {1, 2, 3}) {
    set_host_threads(threads);
    for (const float l2 : {0.0f, 0.01f}) {
      const std::string what = std::string(shape.name) + " k=" + std::to_string(k) +
                               " threads=" + std::to_string(threads) +
                               " l2=" + std::to_string(l2);
      (void)expect_gradient(hb, params, k, l2, what, /*with_margins=*/threads != 3);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, FmGradientTest,
                         ::testing::Combine(::testing::ValuesIn(kShapes),
                                            ::testing::Values(0, 1, 5, 16, 64), ::testing::Bool(),
                                            ::testing::Bool()),
                         [](const ::testing::TestParamInfo<Param>& info) {
                           return std::string(std::get<0>(info.param).name) + "_k" +
                                  std::to_string(std::get<1>(info.param)) +
                                  (std::get<2>(info.param) ? "_vals" : "_ones") +
                                  (std::get<3>(info.param) ? "_bias" : "_nobias");
                         });

// A tiny batch with a slot repeated in a row, an empty row, values and a bias.
HostBatch tiny_batch() {
  HostBatch hb;
  hb.cols = {0, 2, 0, 1, 2, 1, 0};
  hb.vals = {0.7f, -1.3f, 0.4f, 2.0f, 0.5f, -0.6f, 1.1f};
  hb.row_ptr = {0, 3, 3, 5, 6, 7};
  hb.labels = {1.0f, 0.0f, 1.0f, 0.0f, 0.0f};
  hb.bias_slot = 3;
  return hb;
}

// The objective whose gradient fm_gradient computes: mean loss + l2/2 |p|^2.
double objective(const HostBatch& b, const std::vector<double>& p, int k, double l2) {
  double loss = 0.0;
  for (int64_t i = 0; i < b.n_rows(); ++i) {
    double l = 0.0;
    double d = 0.0;
    testing::loss_and_derivative(Loss::kLogistic,
                                 testing::label_sign(b.labels[static_cast<size_t>(i)]),
                                 row_terms(b, p, k, i).m, &l, &d);
    loss += l;
  }
  double reg = 0.0;
  for (const double x : p) reg += x * x;
  return loss / static_cast<double>(b.n_rows()) + 0.5 * l2 * reg;
}

// The FM margin by its definition: the linear part plus <v_a, v_b> x_a x_b
// for every pair a < b of the row's nonzeros.
double pairwise_margin(const HostBatch& b, const std::vector<double>& p, int k, int64_t i) {
  const size_t width = static_cast<size_t>(k) + 1;
  const uint64_t begin = b.row_ptr[static_cast<size_t>(i)];
  const uint64_t end = b.row_ptr[static_cast<size_t>(i) + 1];
  double m = b.bias_slot >= 0 ? p[static_cast<size_t>(b.bias_slot) * width] : 0.0;
  for (uint64_t a = begin; a < end; ++a) {
    m += b.value(a) * p[b.cols[a] * width];
    for (uint64_t c = a + 1; c < end; ++c) {
      double dot = 0.0;
      for (size_t f = 0; f < static_cast<size_t>(k); ++f) {
        dot += p[b.cols[a] * width + 1 + f] * p[b.cols[c] * width + 1 + f];
      }
      m += dot * b.value(a) * b.value(c);
    }
  }
  return m;
}

TEST(FmGradient, ReferenceMatchesFiniteDifferencesAndPairwiseMargin) {
  const HostBatch hb = tiny_batch();
  const int k = 3;
  const double l2 = 0.05;
  const std::vector<float> pf = fm_params(4, k, 0.8, 0.6, 5);
  const std::vector<double> p = to_double(pf);
  for (int64_t i = 0; i < hb.n_rows(); ++i) {
    const double want = pairwise_margin(hb, p, k, i);
    EXPECT_NEAR(row_terms(hb, p, k, i).m, want, 1e-12 * (1.0 + std::fabs(want))) << "row " << i;
  }
  const Reference ref = reference(hb, p, k, l2);
  const double h = 1e-5;
  for (size_t j = 0; j < p.size(); ++j) {
    std::vector<double> up = p;
    std::vector<double> down = p;
    up[j] += h;
    down[j] -= h;
    const double fd = (objective(hb, up, k, l2) - objective(hb, down, k, l2)) / (2.0 * h);
    EXPECT_NEAR(ref.grad[j], fd, 1e-8 * (1.0 + std::fabs(fd))) << "param " << j;
  }
  // And the kernel on the same batch, in float.
  for (const int threads : {1, 2}) {
    set_host_threads(threads);
    (void)expect_gradient(hb, pf, k, static_cast<float>(l2), "tiny threads=" +
                                                                 std::to_string(threads));
  }
  set_host_threads(2);
}

TEST(FmGradient, DuplicateSlotMatchesClosedForm) {
  // One row naming slot 0 twice, x = a and b: m = (a + b) w + a b |v|^2,
  // dm/dw = a + b, dm/dv_f = a (S_f - v_f a) + b (S_f - v_f b) = 2 a b v_f.
  const float a = 0.75f;
  const float b = -1.5f;
  HostBatch hb;
  hb.cols = {0, 0};
  hb.vals = {a, b};
  hb.row_ptr = {0, 2};
  hb.labels = {1.0f};
  const std::vector<float> params{0.25f, 0.5f, -0.375f};  // w, v_0, v_1
  const double v2 = 0.5 * 0.5 + 0.375 * 0.375;
  const double m = (a + b) * 0.25 + static_cast<double>(a) * b * v2;
  double l = 0.0;
  double d = 0.0;
  testing::loss_and_derivative(Loss::kLogistic, 1.0, m, &l, &d);
  const DeviceBatch db(hb);
  const DeviceArray<float> dp(params);
  DeviceArray<float> grad(3);
  DeviceArray<float> margin(1);
  const double loss = fm_gradient(db.batch(), dp.data(), 1, 2, 0.0f, grad.data(), margin.data());
  EXPECT_NEAR(loss, l, 1e-6 * l);
  EXPECT_NEAR(margin.to_host()[0], m, 1e-6 * std::fabs(m));
  const std::vector<float> g = grad.to_host();
  const double want[3] = {d * (a + b), d * 2.0 * a * b * 0.5, d * 2.0 * a * b * -0.375};
  for (size_t j = 0; j < 3; ++j) EXPECT_NEAR(g[j], want[j], 1e-5 * std::fabs(want[j])) << j;
}

TEST(FmGradient, KZeroEqualsLinearLogisticGradient) {
  for (const bool bias : {false, true}) {
    for (const bool vals : {false, true}) {
      for (const int threads : {1, 2, 3}) {
        set_host_threads(threads);
        BatchSpec spec;
        spec.rows = 700;
        spec.slots = 90;
        spec.with_bias = bias;
        spec.with_vals = vals;
        spec.seed = 21;
        const HostBatch hb = testing::random_batch(spec);
        const std::vector<float> w = fm_params(spec.slots, 0, 0.5, 0.0, 22);
        const Reference ref = reference(hb, to_double(w), 0, 0.01);
        const DeviceBatch db(hb);
        const DeviceArray<float> dw(w);
        DeviceArray<float> fm(w.size());
        DeviceArray<float> lin(w.size());
        const double fm_loss =
            fm_gradient(db.batch(), dw.data(), spec.slots, 0, 0.01f, fm.data(), nullptr);
        const double lin_loss = linear_gradient(Loss::kLogistic, db.batch(), dw.data(),
                                                spec.slots, 0.01f, lin.data(), nullptr);
        const std::string what = std::string(bias ? "bias " : "") + (vals ? "vals " : "ones ") +
                                 "threads=" + std::to_string(threads);
        EXPECT_NEAR(fm_loss, lin_loss, 2.0 * ref.loss_tol) << what;
        const std::vector<float> g = fm.to_host();
        const std::vector<float> want = lin.to_host();
        for (size_t j = 0; j < g.size(); ++j) {
          EXPECT_NEAR(g[j], want[j], 2.0 * ref.grad_tol[j]) << what << " slot " << j;
        }
      }
    }
  }
  set_host_threads(2);
}

TEST(FmGradient, BiasFactorsOnlyTakeL2) {
  BatchSpec spec;
  spec.rows = 300;
  spec.slots = 12;
  spec.with_bias = true;
  spec.seed = 31;
  const HostBatch hb = testing::random_batch(spec);
  const int k = 4;
  const std::vector<float> params = fm_params(spec.slots, k, 0.3, 0.2, 32);
  const std::vector<float> g = expect_gradient(hb, params, k, 0.25f, "bias");
  const size_t bias = static_cast<size_t>(hb.bias_slot) * (k + 1);
  for (size_t f = 1; f <= static_cast<size_t>(k); ++f) {
    EXPECT_EQ(g[bias + f], 0.25f * params[bias + f]) << "factor " << f - 1;
  }
}

TEST(FmGradient, EmptyBatchGivesL2TimesParamsAndZeroLoss) {
  const int k = 6;
  const std::vector<float> p = fm_params(33, k, 2.0, 1.0, 3);
  const DeviceArray<float> dp(p);
  DeviceArray<float> grad(std::vector<float>(p.size(), std::numeric_limits<float>::quiet_NaN()));
  const DeviceArray<uint64_t> row_ptr(std::vector<uint64_t>{0});
  const CsrBatch empty{row_ptr.data(), nullptr, nullptr, nullptr, 0, 32};
  EXPECT_EQ(fm_gradient(empty, dp.data(), 33, k, 0.25f, grad.data(), nullptr), 0.0);
  const std::vector<float> g = grad.to_host();
  for (size_t j = 0; j < p.size(); ++j) EXPECT_EQ(g[j], 0.25f * p[j]) << j;
  EXPECT_EQ(fm_gradient(empty, dp.data(), 33, k, 0.0f, grad.data(), nullptr), 0.0);
  for (const float x : grad.to_host()) EXPECT_EQ(x, 0.0f);
}

TEST(FmGradient, LogisticIsFiniteAtExtremeMargins) {
  // One nonzero per row (no pairs, so m = x w): margins of +-1e4 and +-3e4,
  // large factors that must cancel exactly in S_f^2 - x^2 v_f^2.
  HostBatch hb;
  hb.cols = {0, 0, 1, 1};
  hb.vals = {1.0f, 1.0f, 3.0f, -3.0f};
  hb.row_ptr = {0, 1, 2, 3, 4};
  hb.labels = {1.0f, 0.0f, 1.0f, 1.0f};
  const std::vector<float> params{1e4f, 2.0f, -1e4f, 0.5f};  // k = 1
  const DeviceBatch db(hb);
  const DeviceArray<float> dp(params);
  DeviceArray<float> grad(4);
  const double loss = fm_gradient(db.batch(), dp.data(), 2, 1, 0.0f, grad.data(), nullptr);
  EXPECT_NEAR(loss, (1e4 + 3e4) / 4.0, 1e-2);
  const std::vector<float> g = grad.to_host();
  // d = -y sigmoid(-y m): row 1 (y = -1, m = 1e4): +1; row 2 (y = 1, m = -3e4): -1.
  // dm/dv = x (S - v x) = 0 with one nonzero.
  EXPECT_NEAR(g[0], 1.0 / 4.0, 1e-6);
  EXPECT_EQ(g[1], 0.0f);
  EXPECT_NEAR(g[2], -3.0 / 4.0, 1e-6);
  EXPECT_EQ(g[3], 0.0f);
}

TEST(FmGradient, MaxFactorsWorksAndMoreThrows) {
  BatchSpec spec;
  spec.rows = 60;
  spec.slots = 20;
  spec.seed = 41;
  const HostBatch hb = testing::random_batch(spec);
  const std::vector<float> params = fm_params(spec.slots, kFmMaxFactors, 0.3, 0.05, 42);
  (void)expect_gradient(hb, params, kFmMaxFactors, 0.01f, "k = max");
  const DeviceBatch db(hb);
  DeviceArray<float> p(static_cast<size_t>(spec.slots) * (kFmMaxFactors + 2));
  DeviceArray<float> grad(p.size());
  EXPECT_THROW((void)fm_gradient(db.batch(), p.data(), spec.slots, kFmMaxFactors + 1, 0.0f,
                                 grad.data(), nullptr),
               std::invalid_argument);
}

TEST(FmGradient, InvalidArgumentsThrow) {
  const DeviceArray<uint64_t> row_ptr(std::vector<uint64_t>{0});
  DeviceArray<float> p(20);
  DeviceArray<float> grad(20);
  const CsrBatch ok{row_ptr.data(), nullptr, nullptr, nullptr, 0, -1};
  EXPECT_THROW((void)fm_gradient(ok, p.data(), 4, -1, 0.0f, grad.data(), nullptr),
               std::invalid_argument);
  EXPECT_THROW((void)fm_gradient(ok, p.data(), -1, 1, 0.0f, grad.data(), nullptr),
               std::invalid_argument);
  const CsrBatch negative_rows{row_ptr.data(), nullptr, nullptr, nullptr, -3, -1};
  EXPECT_THROW((void)fm_gradient(negative_rows, p.data(), 4, 1, 0.0f, grad.data(), nullptr),
               std::invalid_argument);
  const CsrBatch bias_out{row_ptr.data(), nullptr, nullptr, nullptr, 0, 4};
  EXPECT_THROW((void)fm_gradient(bias_out, p.data(), 4, 1, 0.0f, grad.data(), nullptr),
               std::invalid_argument);
  EXPECT_THROW(fm_margins(ok, p.data(), -2, grad.data()), std::invalid_argument);
  EXPECT_THROW(fm_margins(negative_rows, p.data(), 1, grad.data()), std::invalid_argument);
  fm_margins(ok, p.data(), 1, grad.data());  // no rows: nothing to do
}

TEST(FmMargins, MatchReference) {
  for (const int k : {0, 3, 32}) {
    for (const bool bias : {false, true}) {
      for (const bool vals : {false, true}) {
        BatchSpec spec;
        spec.rows = 500;
        spec.slots = 40;
        spec.with_bias = bias;
        spec.with_vals = vals;
        spec.seed = 11;
        const HostBatch hb = testing::random_batch(spec);
        const std::vector<float> params = fm_params(spec.slots, k, 1.0, 0.5, 12);
        const Reference ref = reference(hb, to_double(params), k, 0.0);
        const DeviceBatch db(hb);
        const DeviceArray<float> dp(params);
        DeviceArray<float> out(static_cast<size_t>(spec.rows));
        fm_margins(db.batch(), dp.data(), k, out.data());
        const std::vector<float> m = out.to_host();
        for (size_t i = 0; i < m.size(); ++i) {
          EXPECT_NEAR(m[i], ref.margins[i], ref.margin_tol[i]) << "k=" << k << " row " << i;
        }
      }
    }
  }
}

}  // namespace
}  // namespace parafab::kernels
