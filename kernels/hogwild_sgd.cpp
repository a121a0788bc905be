// Hogwild! SGD: one step per row, rows in parallel, no locks.
//
// Step of row i at the weights it reads (relaxed atomic loads):
//   m = sum_k x_k w[c_k] (+ w[bias]);  d = dloss(y_i, m);  progressive loss += loss(y_i, m)
// then, for each nonzero k in order, and last the bias as a nonzero of value 1:
//   g = d * x_k + l2 * w[c_k]                (w[c_k] re-read now)
//   AdaGrad: G = g2[c_k] + g^2, g2[c_k] = G, w[c_k] -= lr * g / sqrt(G + eps)
//   plain:   w[c_k] -= lr * g
// On the host, with relaxed atomic loads and stores: another row may write
// the same coordinate between our load and store and one of the two updates
// is lost (Niu et al. 2011 bound the harm for sparse data); no data race in
// the C++ sense. On a GPU, where thousands of rows run at once and every one
// of them writes the bias and the frequent features, that would lose most of
// their updates: there the accumulator and the weight are changed by relaxed
// atomic adds (g^2, then -step), so every row's step lands, each computed
// from the values it read; for plain SGD so many landing steps overshoot,
// and its rows run in slices of kGpuSgdRowsInFlight (hogwild_sgd.h has the
// figures). With a single writer both give the same floats
// (w + (-s) is w - s). A slot that occurs twice in a row is updated twice,
// the second time from the first's result. With one host thread the rows run
// in order and the result is exactly sequential SGD (the tests rely on that).
//
// A step with d == 0 and l2 == 0 changes nothing and is skipped.
//
// hogwild_sgd_parts runs the same steps with one part of the rows per thread
// (in order within a part); a slot >= n_slots is read and written in the
// part's own copy of that hot slot, so the parts share only the cold slots.
#include "kernels/hogwild_sgd.h"

#include <thrust/for_each.h>
#include <thrust/functional.h>
#include <thrust/iterator/counting_iterator.h>

#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "kernels/atomics.h"
#include "kernels/losses.h"
#include "kernels/thrust_backend.h"
#include "parafab/config.h"

namespace parafab::kernels {
namespace {

using detail::load_relaxed;
using detail::store_relaxed;

// kHot: slots >= hot_base name this part's copies of the hot slots
// (hogwild_sgd_parts); without it the loop is exactly hogwild_sgd's.
template <Loss L, bool kVals, bool kHot>
struct HogwildRow {
  const uint64_t* row_ptr;
  const uint32_t* cols;
  const float* vals;
  const float* labels;
  int64_t bias_slot;
  float* w;
  float* g2;
  float lr;
  float l2;
  float eps;
  bool adagrad;      // a uniform branch: not worth doubling the instantiations
  uint64_t nnz_end;  // row_ptr[n_rows], bounds the host prefetches (0 on CUDA)
  int64_t hot_base = 0;     // kHot: n_slots
  float* w_hot = nullptr;   // kHot: this part's copies
  float* g2_hot = nullptr;

  PARAFAB_HD float value(uint64_t k) const { return detail::nonzero_value<kVals>(vals, k); }

  PARAFAB_HD float* weight(int64_t j) const {
    if constexpr (kHot) {
      if (j >= hot_base) return w_hot + (j - hot_base);
    }
    return w + j;
  }
  PARAFAB_HD float* accumulator(int64_t j) const {
    if constexpr (kHot) {
      if (j >= hot_base) return g2_hot + (j - hot_base);
    }
    return g2 + j;
  }

  PARAFAB_HD void update(int64_t j, float dx) const {
    float* wp = weight(j);
    float wj = load_relaxed(wp);
    const float g = dx + l2 * wj;
#if defined(__CUDA_ARCH__)
    // Device: add, so that concurrent steps to one slot all land (above).
    float step = lr * g;
    if (adagrad) {
      const float gg = g * g;
      const float G = detail::fetch_add_relaxed(accumulator(j), gg) + gg;
      step = lr * g / sqrtf(G + eps);
    }
    detail::atomic_add_relaxed(wp, -step);
#else
    if (adagrad) {
      float* gp = accumulator(j);
      const float G = load_relaxed(gp) + g * g;
      store_relaxed(gp, G);
      wj -= lr * g / sqrtf(G + eps);
    } else {
      wj -= lr * g;
    }
    store_relaxed(wp, wj);
#endif
  }

  // Rows are passed to detail::for_each_sum: thrust::for_each runs each
  // exactly once.
  PARAFAB_HD double operator()(int64_t i) const {
    const uint64_t begin = row_ptr[i];
    const uint64_t end = row_ptr[i + 1];
    float m = 0.0f;
    if (bias_slot >= 0) m = load_relaxed(weight(bias_slot));
    for (uint64_t k = begin; k < end; ++k) {
      if (k + detail::kPrefetchDistance < nnz_end)
        detail::prefetch(weight(cols[k + detail::kPrefetchDistance]));
      m += value(k) * load_relaxed(weight(cols[k]));
    }
    const detail::LossValue lv = detail::eval_loss<L>(detail::label_sign(labels[i]), m);
    if (lv.dloss != 0.0f || l2 != 0.0f) {
      for (uint64_t k = begin; k < end; ++k) update(cols[k], lv.dloss * value(k));
      if (bias_slot >= 0) update(bias_slot, lv.dloss);
    }
    return static_cast<double>(lv.loss);
  }
};

// One part of hogwild_sgd_parts: its rows in order, against its own copies.
template <Loss L, bool kVals>
struct HogwildPart {
  HogwildRow<L, kVals, true> row;  // w_hot, g2_hot of part 0
  int64_t n_rows;
  int64_t parts;
  int64_t stride;

  PARAFAB_HD double operator()(int64_t p) const {
    HogwildRow<L, kVals, true> r = row;
    r.w_hot += p * stride;
    if (r.g2_hot != nullptr) r.g2_hot += p * stride;
    double loss = 0.0;
    for (int64_t i = n_rows * p / parts, end = n_rows * (p + 1) / parts; i < end; ++i) loss += r(i);
    return loss;
  }
};

template <Loss L, bool kVals, bool kHot>
HogwildRow<L, kVals, kHot> make_row(const SgdParams& p, const CsrBatch& b, float* w, float* g2) {
  uint64_t nnz_end = 0;
#if !PARAFAB_CUDA
  nnz_end = b.row_ptr[b.n_rows];  // host memory on this backend
#endif
  return {b.row_ptr, b.cols, b.vals,          b.labels,  b.bias_slot, w,
          g2,        p.lr,   p.l2,            p.adagrad_eps, p.adagrad, nnz_end};
}

// Slice size for for_each_sum (0: the whole batch); see SgdParams.
int64_t rows_in_flight(const SgdParams& p) {
  if (p.max_rows_in_flight > 0) return p.max_rows_in_flight;
  return PARAFAB_CUDA && !p.adagrad ? kGpuSgdRowsInFlight : 0;
}

template <Loss L, bool kVals>
double run(const SgdParams& p, const CsrBatch& b, float* w, float* g2) {
  return detail::for_each_sum(b.n_rows, make_row<L, kVals, false>(p, b, w, g2), rows_in_flight(p));
}

template <Loss L, bool kVals>
double run_parts(const SgdParams& p, const CsrBatch& b, float* w, float* g2, int64_t n_slots,
                 const HotCopies& hot) {
  HogwildRow<L, kVals, true> row = make_row<L, kVals, true>(p, b, w, g2);
  row.hot_base = n_slots;
  row.w_hot = hot.w;
  row.g2_hot = hot.g2;
  const HogwildPart<L, kVals> f{row, b.n_rows, hot.parts, hot.stride};
  return detail::for_each_sum(hot.parts, f);
}

template <Loss L>
double run(const SgdParams& p, const CsrBatch& b, float* w, float* g2) {
  return b.vals != nullptr ? run<L, true>(p, b, w, g2) : run<L, false>(p, b, w, g2);
}

template <Loss L>
double run_parts(const SgdParams& p, const CsrBatch& b, float* w, float* g2, int64_t n_slots,
                 const HotCopies& hot) {
  return b.vals != nullptr ? run_parts<L, true>(p, b, w, g2, n_slots, hot)
                           : run_parts<L, false>(p, b, w, g2, n_slots, hot);
}

void check_params(const char* fn, const SgdParams& params, const CsrBatch& batch, const float* g2,
                  int64_t slots) {
  if (params.adagrad && g2 == nullptr) {
    throw std::invalid_argument(std::string("parafab::kernels::") + fn +
                                ": adagrad needs g2, got nullptr");
  }
  if (params.max_rows_in_flight < 0) {
    throw std::invalid_argument(std::string("parafab::kernels::") + fn + ": max_rows_in_flight " +
                                std::to_string(params.max_rows_in_flight) + " is negative");
  }
  if (batch.bias_slot >= slots) {
    throw std::invalid_argument(std::string("parafab::kernels::") + fn + ": bias_slot " +
                                std::to_string(batch.bias_slot) + " outside the " +
                                std::to_string(slots) + " slots");
  }
}

// Hot slot r: start value plus the parts' changes, then every copy refilled.
struct MergeHot {
  const uint32_t* slots;
  float* w;
  float* g2;
  float* w_copies;
  float* g2_copies;
  int64_t parts;
  int64_t stride;
  bool average;  // the weights' changes; the accumulators' are always summed

  // The start value plus the parts' changes, summed or (mean) averaged.
  PARAFAB_HD static void fold(float* model, float* copies, int64_t r, int64_t parts, int64_t stride, bool mean) {
    const float start = *model;
    float v = copies[r];
    if (parts > 1) {
      float change = copies[r] - start;
      for (int64_t p = 1; p < parts; ++p) change += copies[p * stride + r] - start;
      v = start + (mean ? change / static_cast<float>(parts) : change);
    }
    *model = v;
    for (int64_t p = 0; p < parts; ++p) copies[p * stride + r] = v;
  }
  PARAFAB_HD void operator()(int64_t r) const {
    const uint32_t s = slots[r];
    fold(&w[s], w_copies, r, parts, stride, average);
    if (g2 != nullptr) fold(&g2[s], g2_copies, r, parts, stride, false);
  }
};

struct FillHot {
  const uint32_t* slots;
  const float* w;
  const float* g2;
  float* w_copies;
  float* g2_copies;
  int64_t parts;
  int64_t stride;

  PARAFAB_HD void operator()(int64_t r) const {
    for (int64_t p = 0; p < parts; ++p) {
      w_copies[p * stride + r] = w[slots[r]];
      if (g2 != nullptr) g2_copies[p * stride + r] = g2[slots[r]];
    }
  }
};

void check_hot(const char* fn, const HotCopies& hot, bool want_g2) {
  const std::string where = std::string("parafab::kernels::") + fn + ": ";
  if (hot.n_hot < 0 || hot.parts < 1 || hot.stride < hot.n_hot) {
    throw std::invalid_argument(where + "bad HotCopies: n_hot " + std::to_string(hot.n_hot) +
                                ", parts " + std::to_string(hot.parts) + ", stride " +
                                std::to_string(hot.stride));
  }
  if (hot.n_hot > 0 && (hot.w == nullptr || (want_g2 && hot.g2 == nullptr))) {
    throw std::invalid_argument(where + (hot.w == nullptr ? "hot.w" : "hot.g2") +
                                " is nullptr with " + std::to_string(hot.n_hot) + " hot slots");
  }
}

}  // namespace

double hogwild_sgd(const SgdParams& params, const CsrBatch& batch, float* w, float* g2,
                   int64_t n_slots) {
  check_params("hogwild_sgd", params, batch, g2, n_slots);
  if (batch.n_rows <= 0) return 0.0;
  return params.loss == Loss::kLogistic ? run<Loss::kLogistic>(params, batch, w, g2)
                                        : run<Loss::kHinge>(params, batch, w, g2);
}

double hogwild_sgd_parts(const SgdParams& params, const CsrBatch& batch, float* w, float* g2,
                         int64_t n_slots, const HotCopies& hot) {
  check_params("hogwild_sgd_parts", params, batch, g2, n_slots + hot.n_hot);
  check_hot("hogwild_sgd_parts", hot, params.adagrad);
  if (batch.n_rows <= 0) return 0.0;
  return params.loss == Loss::kLogistic
             ? run_parts<Loss::kLogistic>(params, batch, w, g2, n_slots, hot)
             : run_parts<Loss::kHinge>(params, batch, w, g2, n_slots, hot);
}

void fill_hot_copies(const HotCopies& hot, const uint32_t* slots, const float* w, const float* g2) {
  check_hot("fill_hot_copies", hot, g2 != nullptr);
  if (hot.n_hot == 0) return;
  thrust::for_each(detail::policy(), thrust::counting_iterator<int64_t>(0),
                   thrust::counting_iterator<int64_t>(hot.n_hot),
                   FillHot{slots, w, g2, hot.w, hot.g2, hot.parts, hot.stride});
}

void merge_hot_copies(const HotCopies& hot, const uint32_t* slots, float* w, float* g2) {
  check_hot("merge_hot_copies", hot, g2 != nullptr);
  if (hot.n_hot == 0) return;
  thrust::for_each(detail::policy(), thrust::counting_iterator<int64_t>(0),
                   thrust::counting_iterator<int64_t>(hot.n_hot),
                   MergeHot{slots, w, g2, hot.w, hot.g2, hot.parts, hot.stride, hot.average});
}

}  // namespace parafab::kernels
