// Hogwild! SGD: one step per row, rows in parallel, no locks.
//
// Step of row i at the weights it reads (relaxed atomic loads):
//   m = sum_k x_k w[c_k] (+ w[bias]);  d = dloss(y_i, m);  progressive loss += loss(y_i, m)
// then, for each nonzero k in order, and last the bias as a nonzero of value 1:
//   g = d * x_k + l2 * w[c_k]                (w[c_k] re-read now)
//   AdaGrad: G = g2[c_k] + g^2, g2[c_k] = G, w[c_k] -= lr * g / sqrt(G + eps)
//   plain:   w[c_k] -= lr * g
// with relaxed atomic loads and stores: another row may write the same
// coordinate between our load and store and one of the two updates is lost
// (Niu et al. 2011 bound the harm for sparse data); no data race in the C++
// sense. A slot that occurs twice in a row is updated twice, the second time
// from the first's result. With one host thread the rows run in order and the
// result is exactly sequential SGD (the tests rely on that).
//
// A step with d == 0 and l2 == 0 changes nothing and is skipped.
#include "kernels/hogwild_sgd.h"

#include <thrust/functional.h>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/transform_reduce.h>

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

template <Loss L, bool kVals>
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

  PARAFAB_HD float value(uint64_t k) const { return detail::nonzero_value<kVals>(vals, k); }

  PARAFAB_HD void update(int64_t j, float dx) const {
    float wj = load_relaxed(&w[j]);
    const float g = dx + l2 * wj;
    if (adagrad) {
      const float G = load_relaxed(&g2[j]) + g * g;
      store_relaxed(&g2[j], G);
      wj -= lr * g / sqrtf(G + eps);
    } else {
      wj -= lr * g;
    }
    store_relaxed(&w[j], wj);
  }

  // Rows are passed to thrust::transform_reduce, whose OpenMP and CUDA
  // implementations transform each index exactly once.
  PARAFAB_HD double operator()(int64_t i) const {
    const uint64_t begin = row_ptr[i];
    const uint64_t end = row_ptr[i + 1];
    float m = 0.0f;
    if (bias_slot >= 0) m = load_relaxed(&w[bias_slot]);
    for (uint64_t k = begin; k < end; ++k) {
      if (k + detail::kPrefetchDistance < nnz_end)
        detail::prefetch(&w[cols[k + detail::kPrefetchDistance]]);
      m += value(k) * load_relaxed(&w[cols[k]]);
    }
    const detail::LossValue lv = detail::eval_loss<L>(detail::label_sign(labels[i]), m);
    if (lv.dloss != 0.0f || l2 != 0.0f) {
      for (uint64_t k = begin; k < end; ++k) update(cols[k], lv.dloss * value(k));
      if (bias_slot >= 0) update(bias_slot, lv.dloss);
    }
    return static_cast<double>(lv.loss);
  }
};

template <Loss L, bool kVals>
double run(const SgdParams& p, const CsrBatch& b, float* w, float* g2) {
  uint64_t nnz_end = 0;
#if !PARAFAB_CUDA
  nnz_end = b.row_ptr[b.n_rows];  // host memory on this backend
#endif
  const HogwildRow<L, kVals> f{b.row_ptr, b.cols, b.vals, b.labels,      b.bias_slot, w,
                               g2,        p.lr,   p.l2,   p.adagrad_eps, p.adagrad,   nnz_end};
  return thrust::transform_reduce(detail::policy(), thrust::counting_iterator<int64_t>(0),
                                  thrust::counting_iterator<int64_t>(b.n_rows), f, 0.0,
                                  thrust::plus<double>());
}

template <Loss L>
double run(const SgdParams& p, const CsrBatch& b, float* w, float* g2) {
  return b.vals != nullptr ? run<L, true>(p, b, w, g2) : run<L, false>(p, b, w, g2);
}

}  // namespace

double hogwild_sgd(const SgdParams& params, const CsrBatch& batch, float* w, float* g2,
                   int64_t n_slots) {
  if (params.adagrad && g2 == nullptr) {
    throw std::invalid_argument("parafab::kernels::hogwild_sgd: adagrad needs g2, got nullptr");
  }
  if (batch.bias_slot >= n_slots) {
    throw std::invalid_argument("parafab::kernels::hogwild_sgd: bias_slot " +
                                std::to_string(batch.bias_slot) + " outside the " +
                                std::to_string(n_slots) + " slots");
  }
  if (batch.n_rows <= 0) return 0.0;
  return params.loss == Loss::kLogistic ? run<Loss::kLogistic>(params, batch, w, g2)
                                        : run<Loss::kHinge>(params, batch, w, g2);
}

}  // namespace parafab::kernels
