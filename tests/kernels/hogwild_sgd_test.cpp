// kernels::hogwild_sgd. On one host thread the rows run in order, so the
// result must be sequential SGD, which a float64 host loop computes here. On
// several threads (or a GPU) only the outcome is checked: on a planted,
// separable problem the loss must fall. A GPU build also runs the exact
// comparison on a batch whose rows touch disjoint slots, where the order of
// the rows cannot matter.
#include "kernels/hogwild_sgd.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <stdexcept>
#include <string>
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

// Sequential SGD in float64 with the kernel's step (hogwild_sgd.cpp): per row,
// margin and derivative at the current weights, then every nonzero (and last
// the bias) updates its coordinate from that coordinate's current value.
double sequential_sgd(const SgdParams& p, const HostBatch& b, std::vector<double>& w,
                      std::vector<double>& g2) {
  double total = 0.0;
  auto update = [&](size_t j, double dx) {
    const double g = dx + static_cast<double>(p.l2) * w[j];
    if (p.adagrad) {
      g2[j] += g * g;
      w[j] -= static_cast<double>(p.lr) * g / std::sqrt(g2[j] + static_cast<double>(p.adagrad_eps));
    } else {
      w[j] -= static_cast<double>(p.lr) * g;
    }
  };
  for (int64_t i = 0; i < b.n_rows(); ++i) {
    double m = b.bias_slot >= 0 ? w[static_cast<size_t>(b.bias_slot)] : 0.0;
    const uint64_t begin = b.row_ptr[static_cast<size_t>(i)];
    const uint64_t end = b.row_ptr[static_cast<size_t>(i) + 1];
    for (uint64_t k = begin; k < end; ++k) m += static_cast<double>(b.value(k)) * w[b.cols[k]];
    double l = 0.0;
    double d = 0.0;
    testing::loss_and_derivative(p.loss, testing::label_sign(b.labels[static_cast<size_t>(i)]), m,
                                 &l, &d);
    total += l;
    if (d == 0.0 && p.l2 == 0.0f) continue;
    for (uint64_t k = begin; k < end; ++k) update(b.cols[k], d * static_cast<double>(b.value(k)));
    if (b.bias_slot >= 0) update(static_cast<size_t>(b.bias_slot), d);
  }
  return total;
}

// Runs the kernel and the reference from the same start and compares.
//
// Tolerance: float32 SGD drifts from float64 SGD by rounding errors of a few
// u per step that later steps propagate; with the learning rates below the
// steps contract (lr |x|^2 < 1), so the drift stays within a small multiple of
// (steps per coordinate) * u * |w|: for these batches (<= 400 rows over 25
// slots, about 100 steps per coordinate) ~1e-5 at most, 6e-7 measured. We
// allow 2e-5 absolute plus 2e-5 relative, far below a single step
// (lr * |g| ~ 1e-2), so a skipped, repeated or misordered update fails (as
// does a 1% error in the AdaGrad accumulator).
void expect_sequential(const SgdParams& p, const HostBatch& hb, int64_t slots, uint64_t seed,
                       const std::string& what) {
  const std::vector<float> w0 = testing::random_weights(slots, 0.5, seed);
  std::vector<float> g20(static_cast<size_t>(slots));
  std::mt19937_64 rng(seed + 1);
  for (auto& x : g20) x = p.adagrad ? static_cast<float>(0.5 * (rng() % 1000) / 1000.0) : 0.0f;

  std::vector<double> w(w0.begin(), w0.end());
  std::vector<double> g2(g20.begin(), g20.end());
  const double want_loss = sequential_sgd(p, hb, w, g2);

  const DeviceBatch db(hb);
  DeviceArray<float> dw(w0);
  DeviceArray<float> dg2(g20);
  const double got_loss =
      hogwild_sgd(p, db.batch(), dw.data(), p.adagrad ? dg2.data() : nullptr, slots);
  EXPECT_NEAR(got_loss, want_loss, 2e-5 * (1.0 + std::fabs(want_loss))) << what;
  const std::vector<float> gw = dw.to_host();
  const std::vector<float> gg2 = dg2.to_host();
  int bad = 0;
  for (size_t j = 0; j < gw.size() && bad < 5; ++j) {
    if (!(std::fabs(gw[j] - w[j]) <= 2e-5 * (1.0 + std::fabs(w[j])))) {
      ++bad;
      ADD_FAILURE() << what << ": w[" << j << "] = " << gw[j] << ", want " << w[j];
    }
    if (p.adagrad && !(std::fabs(gg2[j] - g2[j]) <= 2e-5 * (1.0 + std::fabs(g2[j])))) {
      ++bad;
      ADD_FAILURE() << what << ": g2[" << j << "] = " << gg2[j] << ", want " << g2[j];
    }
  }
}

class HogwildTest : public ::testing::Test {
 protected:
  void TearDown() override { set_host_threads(2); }
};

TEST_F(HogwildTest, OneThreadIsSequentialSgd) {
#if PARAFAB_CUDA
  GTEST_SKIP() << "rows run concurrently on a GPU; see DisjointRowsMatchSequentialSgd";
#endif
  set_host_threads(1);
  for (const Loss loss : {Loss::kLogistic, Loss::kHinge}) {
    for (const bool adagrad : {false, true}) {
      for (const bool vals : {false, true}) {
        for (const bool bias : {false, true}) {
          for (const int64_t rows : {0, 1, 60, 400}) {
            BatchSpec spec;
            spec.rows = rows;
            spec.slots = 25;  // few slots: repeats within and across rows
            spec.max_nnz = 8;
            spec.with_vals = vals;
            spec.with_bias = bias;
            spec.seed = static_cast<uint64_t>(rows) * 7 + (vals ? 1 : 0) + (bias ? 2 : 0);
            const HostBatch hb = testing::random_batch(spec);
            SgdParams p;
            p.loss = loss;
            p.lr = adagrad ? 0.05f : 0.02f;
            p.l2 = bias ? 1e-3f : 0.0f;
            p.adagrad = adagrad;
            expect_sequential(p, hb, spec.slots, spec.seed + 100,
                              std::string(loss == Loss::kLogistic ? "logistic" : "hinge") +
                                  (adagrad ? " adagrad" : " sgd") + (vals ? " vals" : " ones") +
                                  (bias ? " bias" : "") + " rows=" + std::to_string(rows));
          }
        }
      }
    }
  }
}

// Rows over disjoint slot ranges (duplicates within a row kept): any order of
// the rows gives the sequential result, on any number of threads.
TEST_F(HogwildTest, DisjointRowsMatchSequentialSgd) {
  for (const int threads : {1, 2, 4}) {
    set_host_threads(threads);
    for (const bool adagrad : {false, true}) {
      HostBatch hb;
      std::mt19937_64 rng(5);
      const int64_t rows = 300;
      const int width = 6;  // slots [i * width, (i + 1) * width) belong to row i
      for (int64_t i = 0; i < rows; ++i) {
        const int len = static_cast<int>(rng() % 9);
        for (int k = 0; k < len; ++k) {
          hb.cols.push_back(static_cast<uint32_t>(i * width + static_cast<int64_t>(rng() % width)));
          hb.vals.push_back(static_cast<float>(static_cast<double>(rng() % 2001) / 1000.0 - 1.0));
        }
        hb.row_ptr.push_back(hb.cols.size());
        hb.labels.push_back(rng() % 2 == 0 ? 1.0f : 0.0f);
      }
      SgdParams p;
      p.loss = Loss::kLogistic;
      p.lr = 0.1f;
      p.l2 = 1e-3f;
      p.adagrad = adagrad;
      expect_sequential(
          p, hb, rows * width, 77,
          "disjoint threads=" + std::to_string(threads) + (adagrad ? " adagrad" : ""));
    }
  }
}

// A planted linear separator; several epochs on several threads. The updates
// race (lost updates allowed), so only the outcome is checked.
TEST_F(HogwildTest, ParallelEpochsReduceLossOnSeparableData) {
  const int64_t slots = 200;
  const int64_t rows = 4000;
  std::mt19937_64 rng(9);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::vector<double> planted(static_cast<size_t>(slots));
  for (auto& x : planted) x = normal(rng);
  HostBatch hb;
  for (int64_t i = 0; i < rows; ++i) {
    double m = 0.0;
    for (int k = 0; k < 10; ++k) {
      // A few hot slots (every thread writes them) and a long tail.
      const auto j =
          static_cast<uint32_t>(k < 2 ? rng() % 5 : rng() % static_cast<uint64_t>(slots));
      const auto x = static_cast<float>(normal(rng));
      hb.cols.push_back(j);
      hb.vals.push_back(x);
      m += planted[j] * x;
    }
    hb.row_ptr.push_back(hb.cols.size());
    hb.labels.push_back(m > 0.0 ? 1.0f : 0.0f);
  }
  const DeviceBatch db(hb);
  for (const Loss loss : {Loss::kLogistic, Loss::kHinge}) {
    for (const bool adagrad : {false, true}) {
      set_host_threads(4);
      DeviceArray<float> w(std::vector<float>(static_cast<size_t>(slots), 0.0f));
      DeviceArray<float> g2(std::vector<float>(static_cast<size_t>(slots), 0.0f));
      SgdParams p;
      p.loss = loss;
      p.lr = adagrad ? 0.2f : 0.02f;
      p.adagrad = adagrad;
      const double first = hogwild_sgd(p, db.batch(), w.data(), g2.data(), slots) / rows;
      double last = first;
      for (int epoch = 1; epoch < 8; ++epoch) {
        last = hogwild_sgd(p, db.batch(), w.data(), g2.data(), slots) / rows;
      }
      const std::string what = std::string(loss == Loss::kLogistic ? "logistic" : "hinge") +
                               (adagrad ? " adagrad" : " sgd");
      EXPECT_TRUE(std::isfinite(last)) << what;
      EXPECT_LT(last, 0.5 * first) << what << ": first epoch " << first << ", last " << last;
      // Training accuracy of the learned weights.
      const std::vector<float> wl = w.to_host();
      int64_t correct = 0;
      for (int64_t i = 0; i < rows; ++i) {
        double m = 0.0;
        for (uint64_t k = hb.row_ptr[static_cast<size_t>(i)];
             k < hb.row_ptr[static_cast<size_t>(i) + 1]; ++k) {
          m += static_cast<double>(wl[hb.cols[k]]) * hb.vals[k];
        }
        correct += (m > 0.0) == (hb.labels[static_cast<size_t>(i)] > 0.5f) ? 1 : 0;
      }
      EXPECT_GT(static_cast<double>(correct) / static_cast<double>(rows), 0.9) << what;
    }
  }
}

TEST_F(HogwildTest, RejectsMissingAdagradStateAndBadBias) {
  const DeviceArray<uint64_t> row_ptr(std::vector<uint64_t>{0});
  DeviceArray<float> w(4);
  SgdParams p;
  p.adagrad = true;
  const CsrBatch empty{row_ptr.data(), nullptr, nullptr, nullptr, 0, -1};
  EXPECT_THROW((void)hogwild_sgd(p, empty, w.data(), nullptr, 4), std::invalid_argument);
  const CsrBatch bad_bias{row_ptr.data(), nullptr, nullptr, nullptr, 0, 9};
  p.adagrad = false;
  EXPECT_THROW((void)hogwild_sgd(p, bad_bias, w.data(), nullptr, 4), std::invalid_argument);
  EXPECT_EQ(hogwild_sgd(p, empty, w.data(), nullptr, 4), 0.0);
}

}  // namespace
}  // namespace parafab::kernels
