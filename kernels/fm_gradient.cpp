// Minibatch gradient of a sparse factorization machine.
//
// For every row i, two passes over its nonzeros. The first gathers the
// parameters of each nonzero's slot and sums the linear part, S_f = sum x v_f
// for every factor f (into a local array of kFmMaxFactors floats: the row's
// only scratch) and Q = sum x^2 v_f^2; then m_i = lin + (sum_f S_f^2 - Q) / 2
// (+ bias), the loss and s_i = dloss / dm / n. The second scatters s_i x into
// w's gradient and s_i x (S_f - v_f x) into each v_f's, reading v again (the
// row's parameters are still in cache from the first pass). Each nonzero is
// handled on its own, so a slot repeated in a row gets one contribution per
// occurrence, which is exactly the derivative of the formula in
// fm_gradient.h. Every accumulator starts at l2 * param, so L2 costs no pass
// of its own. Losses are summed in double.
//
// The two strategies of linear_gradient.cpp, for the same reasons (see there):
//
//  - fused, atomic (CUDA; the host when privatizing would not pay): one task
//    per row inside thrust::for_each (detail::for_each_sum: exactly once per
//    row), adding into grad with relaxed atomic fetch_add. Relaxed suffices:
//    nothing reads grad before the algorithm returns.
//
//  - privatized (OpenMP host backend, x86 has no float atomic add): one task
//    per host thread over a contiguous range of rows balanced by nonzeros;
//    range c scatters with plain adds into its own accumulator of n_slots *
//    (1 + k) floats (range 0 straight into grad), then the others are added
//    into grad. No shared writes, no atomics. Chosen by linear_gradient's rule,
//    (threads - 1) * n_slots <= 4 * nnz: an accumulator and a nonzero's
//    scatter both grow by the factor 1 + k, so the ratio is unchanged.
//    Unlike linear_gradient, rows are not processed in blocks: with k factors
//    a nonzero costs ~4k flops, and a row's S_f would have to be buffered.
//
// On CUDA one thread per row: the S_f array lives in local memory (1 KiB per
// thread reserved, only k floats of it touched). The functors are instantiated
// per "has vals" (and per atomic or plain scatter); k is a runtime loop bound.
#include "kernels/fm_gradient.h"

#include <thrust/fill.h>
#include <thrust/for_each.h>
#include <thrust/functional.h>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/transform.h>

#include <cstdint>
#include <stdexcept>
#include <string>

#include "kernels/atomics.h"
#include "kernels/losses.h"
#include "kernels/thrust_backend.h"
#include "parafab/config.h"

#if !PARAFAB_CUDA
#include <omp.h>
#endif

namespace parafab::kernels {
namespace {

using detail::policy;

template <bool kAtomic>
PARAFAB_HD inline void accumulate(float* p, float v) {
  if constexpr (kAtomic) {
    detail::atomic_add_relaxed(p, v);
  } else {
    *p += v;
  }
}

template <bool kVals>
struct FmRowView {
  const uint64_t* row_ptr;
  const uint32_t* cols;
  const float* vals;
  int64_t bias_slot;
  int k;
  int64_t width;  // 1 + k floats per slot

  PARAFAB_HD float value(uint64_t e) const { return detail::nonzero_value<kVals>(vals, e); }

  // m_i, and s[0, k) = S_f of row i. Q is summed per nonzero first, then
  // across nonzeros: an error bound of (len + k) u Q instead of len k u Q.
  PARAFAB_HD float margin(int64_t i, const float* params, float* s) const {
    for (int f = 0; f < k; ++f) s[f] = 0.0f;
    float lin = 0.0f;
    float q = 0.0f;
    const uint64_t end = row_ptr[i + 1];
    for (uint64_t e = row_ptr[i]; e < end; ++e) {
      const float x = value(e);
      const float* p = params + static_cast<int64_t>(cols[e]) * width;
      lin += x * p[0];
      float qe = 0.0f;
      for (int f = 0; f < k; ++f) {
        const float t = x * p[1 + f];
        s[f] += t;
        qe += t * t;
      }
      q += qe;
    }
    float ss = 0.0f;
    for (int f = 0; f < k; ++f) ss += s[f] * s[f];
    float m = lin + 0.5f * (ss - q);
    if (bias_slot >= 0) m += params[bias_slot * width];
    return m;
  }

  // acc[w_j] += g x and acc[v_jf] += g x (S_f - v_jf x) for every nonzero of
  // row i, and acc[w_bias] += g.
  template <bool kAtomic>
  PARAFAB_HD void scatter(int64_t i, float g, const float* s, const float* params,
                          float* acc) const {
    const uint64_t end = row_ptr[i + 1];
    for (uint64_t e = row_ptr[i]; e < end; ++e) {
      const float x = value(e);
      const int64_t base = static_cast<int64_t>(cols[e]) * width;
      const float gx = g * x;
      accumulate<kAtomic>(&acc[base], gx);
      const float* v = params + base + 1;
      float* dv = acc + base + 1;
      for (int f = 0; f < k; ++f) accumulate<kAtomic>(&dv[f], gx * (s[f] - v[f] * x));
    }
    if (bias_slot >= 0) accumulate<kAtomic>(&acc[bias_slot * width], g);
  }
};

// Margin, S_f, loss and scale (d loss / d margin / n) of one row.
template <bool kVals>
struct FmRowLoss {
  FmRowView<kVals> row;
  const float* labels;
  const float* params;
  float* margins;  // may be null
  float inv_n;

  PARAFAB_HD float scale(int64_t i, float* s, double* loss) const {
    const float m = row.margin(i, params, s);
    if (margins != nullptr) margins[i] = m;
    const detail::LossValue lv =
        detail::eval_loss<Loss::kLogistic>(detail::label_sign(labels[i]), m);
    *loss = static_cast<double>(lv.loss);
    return lv.dloss * inv_n;
  }
};

// Fused strategy: margin, loss and atomic scatter of row i; returns the loss.
template <bool kVals>
struct FusedRow {
  FmRowLoss<kVals> f;
  float* grad;
  PARAFAB_HD double operator()(int64_t i) const {
    float s[kFmMaxFactors];
    double loss = 0.0;
    const float g = f.scale(i, s, &loss);
    if (g != 0.0f) f.row.template scatter<true>(i, g, s, f.params, grad);
    return loss;
  }
};

#if !PARAFAB_CUDA  // the privatized strategy: host backend only

// First row r in [0, n_rows] with row_ptr[r] >= target.
inline int64_t first_row_at(const uint64_t* row_ptr, int64_t n_rows, uint64_t target) {
  int64_t lo = 0;
  int64_t hi = n_rows;
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (row_ptr[mid] < target) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return lo;
}

// Range c of n_ranges (rows balanced by nonzeros) into its accumulator: grad
// for c == 0 (starting at l2 * params), else extra + (c - 1) * n_params
// (starting at 0). losses[c] gets the range's loss sum.
template <bool kVals>
struct PrivateRange {
  FmRowLoss<kVals> f;
  int64_t n_rows;
  int64_t n_ranges;
  int64_t n_params;
  float l2;
  float* grad;
  float* extra;
  double* losses;

  int64_t boundary(int64_t c) const {
    if (c == 0) return 0;
    if (c == n_ranges) return n_rows;
    const uint64_t* row_ptr = f.row.row_ptr;
    const uint64_t first = row_ptr[0];
    const double nnz = static_cast<double>(row_ptr[n_rows] - first);
    const auto target =
        static_cast<uint64_t>(nnz * static_cast<double>(c) / static_cast<double>(n_ranges));
    return first_row_at(row_ptr, n_rows, first + target);
  }

  void operator()(int64_t c) const {
    float* acc = c == 0 ? grad : extra + (c - 1) * n_params;
    if (c == 0) {
      for (int64_t j = 0; j < n_params; ++j) acc[j] = l2 * f.params[j];
    } else {
      for (int64_t j = 0; j < n_params; ++j) acc[j] = 0.0f;
    }
    const int64_t r1 = boundary(c + 1);
    double loss = 0.0;
    float s[kFmMaxFactors];
    for (int64_t i = boundary(c); i < r1; ++i) {
      double l = 0.0;
      const float g = f.scale(i, s, &l);
      loss += l;
      if (g != 0.0f) f.row.template scatter<false>(i, g, s, f.params, acc);
    }
    losses[c] = loss;
  }
};

// grad[j] += the other accumulators at j.
struct AddExtra {
  float* grad;
  const float* extra;
  int64_t n_extra;
  int64_t n_params;
  void operator()(int64_t j) const {
    float v = grad[j];
    for (int64_t c = 0; c < n_extra; ++c) v += extra[c * n_params + j];
    grad[j] = v;
  }
};

#endif  // !PARAFAB_CUDA

template <bool kVals>
struct MarginRow {
  FmRowView<kVals> row;
  const float* params;
  float* out;
  PARAFAB_HD void operator()(int64_t i) const {
    float s[kFmMaxFactors];
    out[i] = row.margin(i, params, s);
  }
};

struct ScaleBy {
  float a;
  PARAFAB_HD float operator()(float x) const { return a * x; }
};

void init_l2(const float* params, int64_t n_params, float l2, float* grad) {
  if (n_params <= 0) return;
  if (l2 != 0.0f) {
    thrust::transform(policy(), params, params + n_params, grad, ScaleBy{l2});
  } else {
    thrust::fill(policy(), grad, grad + n_params, 0.0f);
  }
}

// Accumulators for the privatized strategy, or 0 for the fused atomic one.
int64_t private_ranges(const CsrBatch& b, int64_t n_slots) {
#if PARAFAB_CUDA
  (void)b;
  (void)n_slots;
  return 0;
#else
  const int64_t threads = omp_get_max_threads();
  if (threads <= 1) return 1;
  const uint64_t nnz = b.row_ptr[b.n_rows] - b.row_ptr[0];  // host memory on this backend
  const bool pays = static_cast<double>(threads - 1) * static_cast<double>(n_slots) <=
                    4.0 * static_cast<double>(nnz);
  return pays ? threads : 0;
#endif
}

template <bool kVals>
FmRowView<kVals> row_view(const CsrBatch& b, int k) {
  return {b.row_ptr, b.cols, b.vals, b.bias_slot, k, static_cast<int64_t>(k) + 1};
}

template <bool kVals>
double gradient_sum(const CsrBatch& b, const float* params, int64_t n_slots, int k, float l2,
                    float* grad, float* margins) {
  const int64_t n_params = n_slots * (static_cast<int64_t>(k) + 1);
  const FmRowLoss<kVals> f{row_view<kVals>(b, k), b.labels, params, margins,
                           1.0f / static_cast<float>(b.n_rows)};
  const int64_t ranges = private_ranges(b, n_slots);
  if (ranges == 0) {
    init_l2(params, n_params, l2, grad);
    return detail::for_each_sum(b.n_rows, FusedRow<kVals>{f, grad});
  }
#if !PARAFAB_CUDA
  detail::Scratch<double> losses(static_cast<size_t>(ranges));
  detail::Scratch<float> extra(static_cast<size_t>((ranges - 1) * n_params));
  thrust::for_each(
      policy(), thrust::counting_iterator<int64_t>(0), thrust::counting_iterator<int64_t>(ranges),
      PrivateRange<kVals>{f, b.n_rows, ranges, n_params, l2, grad, extra.get(), losses.get()});
  if (ranges > 1 && n_params > 0) {
    thrust::for_each(policy(), thrust::counting_iterator<int64_t>(0),
                     thrust::counting_iterator<int64_t>(n_params),
                     AddExtra{grad, extra.get(), ranges - 1, n_params});
  }
  double loss = 0.0;
  for (int64_t c = 0; c < ranges; ++c) loss += losses.get()[c];  // host memory on this backend
  return loss;
#else
  return 0.0;  // not reached: private_ranges() is 0 on CUDA
#endif
}

template <bool kVals>
void margins_impl(const CsrBatch& b, const float* params, int k, float* out) {
  thrust::for_each(policy(), thrust::counting_iterator<int64_t>(0),
                   thrust::counting_iterator<int64_t>(b.n_rows),
                   MarginRow<kVals>{row_view<kVals>(b, k), params, out});
}

void check_shape(const char* fn, const CsrBatch& b, int k) {
  if (k < 0 || k > kFmMaxFactors) {
    throw std::invalid_argument(std::string("parafab::kernels::") + fn + ": k = " +
                                std::to_string(k) + " outside [0, " +
                                std::to_string(kFmMaxFactors) + "]");
  }
  if (b.n_rows < 0) {
    throw std::invalid_argument(std::string("parafab::kernels::") + fn +
                                ": negative n_rows = " + std::to_string(b.n_rows));
  }
}

}  // namespace

double fm_gradient(const CsrBatch& batch, const float* params, int64_t n_slots, int k, float l2,
                   float* grad, float* margins) {
  check_shape("fm_gradient", batch, k);
  if (n_slots < 0) {
    throw std::invalid_argument("parafab::kernels::fm_gradient: negative n_slots = " +
                                std::to_string(n_slots));
  }
  if (batch.bias_slot >= n_slots) {
    throw std::invalid_argument("parafab::kernels::fm_gradient: bias_slot " +
                                std::to_string(batch.bias_slot) + " outside the " +
                                std::to_string(n_slots) + " slots");
  }
  if (batch.n_rows == 0) {
    init_l2(params, n_slots * (static_cast<int64_t>(k) + 1), l2, grad);
    return 0.0;
  }
  const double sum = batch.vals != nullptr
                         ? gradient_sum<true>(batch, params, n_slots, k, l2, grad, margins)
                         : gradient_sum<false>(batch, params, n_slots, k, l2, grad, margins);
  return sum / static_cast<double>(batch.n_rows);
}

void fm_margins(const CsrBatch& batch, const float* params, int k, float* out) {
  check_shape("fm_margins", batch, k);
  if (batch.n_rows == 0) return;
  if (batch.vals != nullptr) {
    margins_impl<true>(batch, params, k, out);
  } else {
    margins_impl<false>(batch, params, k, out);
  }
}

}  // namespace parafab::kernels
