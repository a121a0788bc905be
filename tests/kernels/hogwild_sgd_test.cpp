// kernels::hogwild_sgd. On one host thread the rows run in order, so the
// result must be sequential SGD, which a float64 host loop computes here. On
// several threads (or a GPU) only the outcome is checked: on a planted,
// separable problem the loss must fall. A GPU build also runs the exact
// comparison on a batch whose rows touch disjoint slots, where the order of
// the rows cannot matter, and on batches run one row in flight
// (SgdParams::max_rows_in_flight), which orders them. hogwild_sgd_parts
// (per-part copies of hot slots) is compared with its own float64 reference
// on batches whose parts share only the hot slots.
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

// max_rows_in_flight slices the batch: with one row in flight the rows run
// in order on any number of threads (and on a GPU), so the result is
// sequential SGD; slices of several rows on one thread must also sum every
// slice's losses and keep the order.
TEST_F(HogwildTest, SlicesOfTheBatchRunInOrder) {
  for (const int threads : {1, 2, 4}) {
    for (const int64_t in_flight : {1, 3, 64}) {
      if (threads > 1 && in_flight > 1) continue;  // rows of a slice race then
#if PARAFAB_CUDA
      if (in_flight > 1) continue;
#endif
      set_host_threads(threads);
      for (const bool adagrad : {false, true}) {
        BatchSpec spec;
        spec.rows = 200;
        spec.slots = 25;
        spec.max_nnz = 8;
        spec.with_vals = true;
        spec.with_bias = true;
        spec.seed = 41;
        const HostBatch hb = testing::random_batch(spec);
        SgdParams p;
        p.lr = adagrad ? 0.05f : 0.02f;
        p.l2 = 1e-3f;
        p.adagrad = adagrad;
        p.max_rows_in_flight = in_flight;
        expect_sequential(p, hb, spec.slots, 43,
                          "threads=" + std::to_string(threads) + " in_flight=" + std::to_string(in_flight) +
                              (adagrad ? " adagrad" : " sgd"));
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

// hogwild_sgd_parts: each part's rows name cold slots of their own and the
// shared hot slots (as n_slots + r, the bias among them). The parts then
// interact only through the merge, so on any number of threads the result is
// this float64 reference: each part runs sequential SGD over its rows from the
// start values with its own copy of the hot slots; the merge sets each hot
// weight to start + the sum (AdaGrad) or the mean (plain SGD, `average`) of
// the parts' changes, and each accumulator to start + their sum.
TEST_F(HogwildTest, PartsWithHotCopiesMatchTheirReference) {
  const int64_t width = 8;  // cold slots [p * width, (p + 1) * width) belong to part p
  const int64_t n_hot = 5;  // hot slot 4 is the bias
  for (const int threads : {1, 2, 4}) {
    set_host_threads(threads);
    for (const int64_t parts : {1, 2, 3, 4}) {
      for (const bool adagrad : {false, true}) {
        const int64_t n_slots = parts * width + n_hot;  // hot r lives at parts * width + r
        HostBatch hb;
        hb.bias_slot = n_slots + 4;
        std::mt19937_64 rng(static_cast<uint64_t>(parts * 10 + threads) + (adagrad ? 5 : 0));
        const int64_t rows = 120;
        for (int64_t i = 0; i < rows; ++i) {
          const int64_t part = [&] {
            int64_t p = 0;
            while (i >= rows * (p + 1) / parts) ++p;
            return p;
          }();
          const int len = static_cast<int>(rng() % 9);
          for (int k = 0; k < len; ++k) {
            const bool hot = rng() % 2 == 0;
            hb.cols.push_back(static_cast<uint32_t>(
                hot ? n_slots + static_cast<int64_t>(rng() % 4)
                    : part * width + static_cast<int64_t>(rng() % width)));
            hb.vals.push_back(static_cast<float>(static_cast<double>(rng() % 2001) / 1000.0 - 1.0));
          }
          hb.row_ptr.push_back(hb.cols.size());
          hb.labels.push_back(rng() % 2 == 0 ? 1.0f : 0.0f);
        }
        SgdParams p;
        p.loss = adagrad ? Loss::kLogistic : Loss::kHinge;
        p.lr = adagrad ? 0.1f : 0.02f;
        p.l2 = 1e-3f;
        p.adagrad = adagrad;
        const std::vector<float> w0 = testing::random_weights(n_slots, 0.5, 3);
        const std::vector<float> g20(static_cast<size_t>(n_slots), adagrad ? 0.25f : 0.0f);
        std::vector<uint32_t> hot_slots;
        for (int64_t r = 0; r < n_hot; ++r) hot_slots.push_back(static_cast<uint32_t>(parts * width + r));

        // The reference, in slots [0, n_slots + n_hot): the tail is a part's copy.
        std::vector<double> w(w0.begin(), w0.end()), g2(g20.begin(), g20.end());
        std::vector<double> merged_w(static_cast<size_t>(n_hot)), merged_g2(static_cast<size_t>(n_hot));
        double want_loss = 0.0;
        for (int64_t part = 0; part < parts; ++part) {
          HostBatch sub;
          sub.bias_slot = hb.bias_slot;
          for (int64_t i = rows * part / parts; i < rows * (part + 1) / parts; ++i) {
            for (uint64_t k = hb.row_ptr[static_cast<size_t>(i)]; k < hb.row_ptr[static_cast<size_t>(i) + 1]; ++k) {
              sub.cols.push_back(hb.cols[k]);
              sub.vals.push_back(hb.vals[k]);
            }
            sub.row_ptr.push_back(sub.cols.size());
            sub.labels.push_back(hb.labels[static_cast<size_t>(i)]);
          }
          std::vector<double> we(w.begin(), w.begin() + n_slots), ge(g2.begin(), g2.begin() + n_slots);
          for (const uint32_t s : hot_slots) {
            we.push_back(w0[s]);
            ge.push_back(g20[s]);
          }
          want_loss += sequential_sgd(p, sub, we, ge);
          for (int64_t j = part * width; j < (part + 1) * width; ++j) {
            w[static_cast<size_t>(j)] = we[static_cast<size_t>(j)];
            g2[static_cast<size_t>(j)] = ge[static_cast<size_t>(j)];
          }
          for (int64_t r = 0; r < n_hot; ++r) {
            const auto copy = static_cast<size_t>(n_slots + r);
            const double start_w = w0[hot_slots[static_cast<size_t>(r)]];
            const double start_g2 = g20[hot_slots[static_cast<size_t>(r)]];
            merged_w[static_cast<size_t>(r)] += we[copy] - start_w;  // the changes
            merged_g2[static_cast<size_t>(r)] += ge[copy] - start_g2;
          }
        }
        const bool average = !adagrad;
        for (int64_t r = 0; r < n_hot; ++r) {
          const uint32_t s = hot_slots[static_cast<size_t>(r)];
          const double change = merged_w[static_cast<size_t>(r)];
          w[s] = w0[s] + (average ? change / static_cast<double>(parts) : change);
          g2[s] = g20[s] + merged_g2[static_cast<size_t>(r)];
        }

        const int64_t stride = 16;
        DeviceArray<float> copies_w(static_cast<size_t>(parts * stride));
        DeviceArray<float> copies_g2(static_cast<size_t>(parts * stride));
        const HotCopies hot{n_hot, parts, stride, copies_w.data(), copies_g2.data(), !adagrad};
        const DeviceArray<uint32_t> d_hot_slots(hot_slots);
        DeviceArray<float> dw(w0), dg2(g20);
        float* g2p = adagrad ? dg2.data() : nullptr;
        fill_hot_copies(hot, d_hot_slots.data(), dw.data(), g2p);
        const DeviceBatch db(hb);
        const double got_loss = hogwild_sgd_parts(p, db.batch(), dw.data(), g2p, n_slots, hot);
        merge_hot_copies(hot, d_hot_slots.data(), dw.data(), g2p);

        const std::string what = "threads=" + std::to_string(threads) + " parts=" +
                                 std::to_string(parts) + (adagrad ? " adagrad, summed" : " sgd, averaged");
        EXPECT_NEAR(got_loss, want_loss, 2e-5 * (1.0 + std::fabs(want_loss))) << what;
        const std::vector<float> gw = dw.to_host(), gg2 = dg2.to_host();
        const std::vector<float> cw = copies_w.to_host(), cg2 = copies_g2.to_host();
        auto close = [](double got, double want) { return std::fabs(got - want) <= 2e-5 * (1.0 + std::fabs(want)); };
        int bad = 0;
        for (int64_t j = 0; j < n_slots && bad < 5; ++j) {
          const auto u = static_cast<size_t>(j);
          if (!close(gw[u], w[u])) {
            ++bad;
            ADD_FAILURE() << what << ": w[" << j << "] = " << gw[u] << ", want " << w[u];
          }
          if (adagrad && !close(gg2[u], g2[u])) {
            ++bad;
            ADD_FAILURE() << what << ": g2[" << j << "] = " << gg2[u] << ", want " << g2[u];
          }
        }
        // After the merge every copy holds the merged value.
        for (int64_t q = 0; q < parts; ++q) {
          for (int64_t r = 0; r < n_hot; ++r) {
            const auto c = static_cast<size_t>(q * stride + r);
            EXPECT_EQ(cw[c], gw[hot_slots[static_cast<size_t>(r)]]) << what << " part " << q << " hot " << r;
            if (adagrad) {
              EXPECT_EQ(cg2[c], gg2[hot_slots[static_cast<size_t>(r)]]) << what;
            }
          }
        }
      }
    }
  }
}

TEST_F(HogwildTest, RejectsBadHotCopies) {
  const DeviceArray<uint64_t> row_ptr(std::vector<uint64_t>{0});
  DeviceArray<float> w(4), copies(32);
  const DeviceArray<uint32_t> slots(std::vector<uint32_t>{0, 1});
  SgdParams p;
  p.adagrad = false;
  const CsrBatch empty{row_ptr.data(), nullptr, nullptr, nullptr, 0, -1};
  const HotCopies good{2, 2, 16, copies.data(), nullptr};
  EXPECT_EQ(hogwild_sgd_parts(p, empty, w.data(), nullptr, 4, good), 0.0);
  // The bias may name a hot copy (4 + 1) but nothing past them.
  const CsrBatch hot_bias{row_ptr.data(), nullptr, nullptr, nullptr, 0, 5};
  EXPECT_EQ(hogwild_sgd_parts(p, hot_bias, w.data(), nullptr, 4, good), 0.0);
  const CsrBatch past{row_ptr.data(), nullptr, nullptr, nullptr, 0, 6};
  EXPECT_THROW((void)hogwild_sgd_parts(p, past, w.data(), nullptr, 4, good), std::invalid_argument);
  for (const HotCopies bad : {HotCopies{2, 0, 16, copies.data(), nullptr},
                              HotCopies{2, 2, 1, copies.data(), nullptr},
                              HotCopies{-1, 2, 16, copies.data(), nullptr},
                              HotCopies{2, 2, 16, nullptr, nullptr}}) {
    EXPECT_THROW((void)hogwild_sgd_parts(p, empty, w.data(), nullptr, 4, bad), std::invalid_argument);
    EXPECT_THROW(merge_hot_copies(bad, slots.data(), w.data(), nullptr), std::invalid_argument);
  }
  p.adagrad = true;  // needs the copies' accumulators too
  DeviceArray<float> g2(4);
  EXPECT_THROW((void)hogwild_sgd_parts(p, empty, w.data(), g2.data(), 4, good), std::invalid_argument);
  EXPECT_THROW(fill_hot_copies(good, slots.data(), w.data(), g2.data()), std::invalid_argument);
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
  p.max_rows_in_flight = -1;
  EXPECT_THROW((void)hogwild_sgd(p, empty, w.data(), nullptr, 4), std::invalid_argument);
}

}  // namespace
}  // namespace parafab::kernels
