// Minibatch gradient of a sparse linear model.
//
// For every row i: the margin m_i = sum_k x_k w[col_k] (+ w[bias]), the loss
// and its derivative d_i, then d_i * x_k / n is scatter-added into the
// gradient of slot col_k. Every accumulator starts at l2 * w[j], so the L2 term
// costs no pass of its own. Rows whose derivative is 0 (hinge with y m >= 1)
// skip the scatter. Losses are summed in double.
//
// Two strategies, both plain Thrust:
//
//  - fused, atomic (CUDA; the host when privatizing would not pay): one task
//    per row does margin, loss and scatter, adding into grad with relaxed
//    atomic fetch_add. Every addition lands; relaxed order is enough because
//    nothing reads grad before the algorithm returns. The task runs inside
//    thrust::for_each (detail::for_each_sum), which runs it exactly once per
//    row, and the row losses are summed after.
//
//  - privatized (OpenMP host backend): x86 has no float atomic add, so each
//    fetch_add is a lock cmpxchg loop that stalls the memory pipeline
//    (measured: the atomic version ran at ~0.1 of the memory-copy ceiling on 2
//    threads). One task per host thread: the rows are cut into contiguous
//    ranges balanced by nonzeros, and range c adds its rows into its own dense
//    accumulator with plain stores (range 0 straight into grad); then the
//    other accumulators are added into grad. Same sums, no shared writes, no
//    atomics. Within a range the rows go in blocks of a few thousand
//    nonzeros: first the margins, losses and scales of the block's rows, then
//    their scatter. Apart, the gathers from w and the scatters into the
//    accumulator do not evict each other's lines and each loop has
//    independent work (interleaved row by row, a row's scatter waits on its
//    margin: measured ~2x slower on one thread); per block, the block's cols
//    and vals are still in cache for the scatter, and the scales need a
//    buffer of one block, not of the batch. Used when the extra accumulators
//    cost less than the atomics they replace: (threads - 1) * n_slots <= 4 *
//    nnz; with one thread, always (no extras).
//
// The functors are instantiated per (loss, has vals) so that the inner loops
// carry no branches; the bias is one test per row.
#include "kernels/linear_gradient.h"

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

#if PARAFAB_CUDA
constexpr bool kHostBackend = false;
#else
constexpr bool kHostBackend = true;
#endif

template <bool kVals>
struct RowView {
  const uint64_t* row_ptr;
  const uint32_t* cols;
  const float* vals;
  int64_t bias_slot;
  uint64_t nnz_end;  // row_ptr[n_rows], bounds the host prefetches (0 on CUDA)

  PARAFAB_HD float value(uint64_t k) const { return detail::nonzero_value<kVals>(vals, k); }

  PARAFAB_HD float margin(int64_t i, const float* w) const {
    const uint64_t begin = row_ptr[i];
    const uint64_t end = row_ptr[i + 1];
    float m = 0.0f;
    if constexpr (kHostBackend) {
      // Four partial sums: with one, every nonzero waits for the previous
      // float add, whose latency (3-4 cycles) is most of a nonzero's time when
      // the weights hit in L2 (with the blocking of the privatized strategy:
      // 8-10% faster on one thread at 2^16 and 2^20 slots). The summation
      // order does not change the error bound, (len + 2) u sum |x w|.
      float m1 = 0.0f;
      float m2 = 0.0f;
      float m3 = 0.0f;
      uint64_t k = begin;
      for (; k + 4 <= end; k += 4) {
        if (k + detail::kPrefetchDistance + 4 <= nnz_end) {
          const uint32_t* ahead = cols + k + detail::kPrefetchDistance;
          detail::prefetch(&w[ahead[0]]);
          detail::prefetch(&w[ahead[1]]);
          detail::prefetch(&w[ahead[2]]);
          detail::prefetch(&w[ahead[3]]);
        }
        m += value(k) * w[cols[k]];
        m1 += value(k + 1) * w[cols[k + 1]];
        m2 += value(k + 2) * w[cols[k + 2]];
        m3 += value(k + 3) * w[cols[k + 3]];
      }
      for (; k < end; ++k) m += value(k) * w[cols[k]];
      m = (m + m1) + (m2 + m3);
    } else {
      for (uint64_t k = begin; k < end; ++k) m += value(k) * w[cols[k]];
    }
    if (bias_slot >= 0) m += w[bias_slot];
    return m;
  }

  // acc[slot] += s * x for every nonzero of row i (and acc[bias] += s),
  // plain adds: the accumulator belongs to the caller alone.
  PARAFAB_HD void scatter_plain(int64_t i, float s, float* acc) const {
    const uint64_t end = row_ptr[i + 1];
    for (uint64_t k = row_ptr[i]; k < end; ++k) acc[cols[k]] += s * value(k);
    if (bias_slot >= 0) acc[bias_slot] += s;
  }

  // The same with relaxed atomic adds into a shared grad.
  PARAFAB_HD void scatter_atomic(int64_t i, float s, float* grad) const {
    const uint64_t end = row_ptr[i + 1];
    for (uint64_t k = row_ptr[i]; k < end; ++k) {
      detail::atomic_add_relaxed(&grad[cols[k]], s * value(k));
    }
    if (bias_slot >= 0) detail::atomic_add_relaxed(&grad[bias_slot], s);
  }
};

// Margin, loss and scale (d loss / d margin / n) of one row.
template <Loss L, bool kVals>
struct RowLoss {
  RowView<kVals> row;
  const float* labels;
  const float* w;
  float* margins;  // may be null
  float inv_n;

  PARAFAB_HD float scale(int64_t i, double* loss) const {
    const float m = row.margin(i, w);
    if (margins != nullptr) margins[i] = m;
    const detail::LossValue lv = detail::eval_loss<L>(detail::label_sign(labels[i]), m);
    *loss = static_cast<double>(lv.loss);
    return lv.dloss * inv_n;
  }
};

// Fused strategy: margin, loss and atomic scatter of row i; returns the loss.
template <Loss L, bool kVals>
struct FusedRow {
  RowLoss<L, kVals> f;
  float* grad;
  PARAFAB_HD double operator()(int64_t i) const {
    double loss = 0.0;
    const float s = f.scale(i, &loss);
    if (s != 0.0f) f.row.scatter_atomic(i, s, grad);
    return loss;
  }
};

#if !PARAFAB_CUDA  // the privatized strategy: host backend only

// First row r in [0, n_rows] with row_ptr[r] >= target.
PARAFAB_HD inline int64_t first_row_at(const uint64_t* row_ptr, int64_t n_rows, uint64_t target) {
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

// Rows of one block of the privatized strategy: at most kBlockRows rows and,
// past the first row, at most kBlockNnz nonzeros, so that the block's cols and
// vals (8 bytes a nonzero) read by the margins are still in L1/L2 when the
// scatter reads them again, instead of coming from memory twice.
constexpr int64_t kBlockRows = 256;
constexpr uint64_t kBlockNnz = 4096;

// Privatized strategy, phases 1 and 2: range c of n_ranges (rows balanced by
// nonzeros), block by block: margins, losses and scales of the block's rows,
// then their scatter into the range's accumulator, grad for c == 0 (starting
// at l2 * w), else extra + (c - 1) * n_slots (starting at 0). losses[c] gets
// the range's loss sum.
template <Loss L, bool kVals>
struct BlockedRange {
  RowLoss<L, kVals> f;
  int64_t n_rows;
  int64_t n_ranges;
  int64_t n_slots;
  float l2;
  float* grad;
  float* extra;
  double* losses;

  PARAFAB_HD int64_t boundary(int64_t c) const {
    if (c == 0) return 0;
    if (c == n_ranges) return n_rows;
    const uint64_t* row_ptr = f.row.row_ptr;
    const uint64_t first = row_ptr[0];
    const double nnz = static_cast<double>(row_ptr[n_rows] - first);
    const auto target =
        static_cast<uint64_t>(nnz * static_cast<double>(c) / static_cast<double>(n_ranges));
    return first_row_at(row_ptr, n_rows, first + target);
  }

  PARAFAB_HD void operator()(int64_t c) const {
    float* acc = c == 0 ? grad : extra + (c - 1) * n_slots;
    if (c == 0) {
      for (int64_t j = 0; j < n_slots; ++j) acc[j] = l2 * f.w[j];
    } else {
      for (int64_t j = 0; j < n_slots; ++j) acc[j] = 0.0f;
    }
    const uint64_t* row_ptr = f.row.row_ptr;
    const int64_t r1 = boundary(c + 1);
    double loss = 0.0;
    float scale[kBlockRows];
    for (int64_t b0 = boundary(c); b0 < r1;) {
      int64_t b1 = b0 + 1;
      while (b1 < r1 && b1 - b0 < kBlockRows && row_ptr[b1 + 1] - row_ptr[b0] <= kBlockNnz) ++b1;
      for (int64_t i = b0; i < b1; ++i) {
        double l = 0.0;
        scale[i - b0] = f.scale(i, &l);
        loss += l;
      }
      for (int64_t i = b0; i < b1; ++i) {
        const float s = scale[i - b0];
        if (s != 0.0f) f.row.scatter_plain(i, s, acc);
      }
      b0 = b1;
    }
    losses[c] = loss;
  }
};

// Privatized strategy, last phase: grad[j] += the other accumulators at j.
struct AddExtra {
  float* grad;
  const float* extra;
  int64_t n_extra;
  int64_t n_slots;
  PARAFAB_HD void operator()(int64_t j) const {
    float v = grad[j];
    for (int64_t c = 0; c < n_extra; ++c) v += extra[c * n_slots + j];
    grad[j] = v;
  }
};

#endif  // !PARAFAB_CUDA

template <bool kVals>
struct MarginRow {
  RowView<kVals> row;
  const float* w;
  float* out;
  PARAFAB_HD void operator()(int64_t i) const { out[i] = row.margin(i, w); }
};

struct ScaleBy {
  float a;
  PARAFAB_HD float operator()(float x) const { return a * x; }
};

struct Sigmoid {
  PARAFAB_HD float operator()(float m) const { return detail::stable_sigmoid(m); }
};

void init_l2(const float* w, int64_t n_slots, float l2, float* grad) {
  if (n_slots <= 0) return;
  if (l2 != 0.0f) {
    thrust::transform(policy(), w, w + n_slots, grad, ScaleBy{l2});
  } else {
    thrust::fill(policy(), grad, grad + n_slots, 0.0f);
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
  const uint64_t nnz = b.row_ptr[b.n_rows] - b.row_ptr[0];
  const bool pays = static_cast<double>(threads - 1) * static_cast<double>(n_slots) <=
                    4.0 * static_cast<double>(nnz);
  return pays ? threads : 0;
#endif
}

template <Loss L, bool kVals>
double gradient_sum(const CsrBatch& b, const float* w, int64_t n_slots, float l2, float* grad,
                    float* margins) {
  uint64_t nnz_end = 0;
  if constexpr (kHostBackend) nnz_end = b.row_ptr[b.n_rows];  // host memory on this backend
  const RowView<kVals> row{b.row_ptr, b.cols, b.vals, b.bias_slot, nnz_end};
  const RowLoss<L, kVals> f{row, b.labels, w, margins, 1.0f / static_cast<float>(b.n_rows)};
  const int64_t ranges = private_ranges(b, n_slots);
  if (ranges == 0) {
    init_l2(w, n_slots, l2, grad);
    return detail::for_each_sum(b.n_rows, FusedRow<L, kVals>{f, grad});
  }
#if !PARAFAB_CUDA
  {
    detail::Scratch<double> losses(static_cast<size_t>(ranges));
    detail::Scratch<float> extra(static_cast<size_t>((ranges - 1) * n_slots));
    thrust::for_each(policy(), thrust::counting_iterator<int64_t>(0),
                     thrust::counting_iterator<int64_t>(ranges),
                     BlockedRange<L, kVals>{f, b.n_rows, ranges, n_slots, l2, grad, extra.get(),
                                            losses.get()});
    if (ranges > 1 && n_slots > 0) {
      thrust::for_each(policy(), thrust::counting_iterator<int64_t>(0),
                       thrust::counting_iterator<int64_t>(n_slots),
                       AddExtra{grad, extra.get(), ranges - 1, n_slots});
    }
    double loss = 0.0;
    for (int64_t c = 0; c < ranges; ++c) loss += losses.get()[c];  // host memory on this backend
    return loss;
  }
#else
  return 0.0;  // not reached: private_ranges() is 0 on CUDA
#endif
}

template <Loss L>
double gradient_sum(const CsrBatch& b, const float* w, int64_t n_slots, float l2, float* grad,
                    float* margins) {
  return b.vals != nullptr ? gradient_sum<L, true>(b, w, n_slots, l2, grad, margins)
                           : gradient_sum<L, false>(b, w, n_slots, l2, grad, margins);
}

template <bool kVals>
void margins_impl(const CsrBatch& b, const float* w, float* out) {
  uint64_t nnz_end = 0;
  if constexpr (kHostBackend) nnz_end = b.row_ptr[b.n_rows];
  thrust::for_each(policy(), thrust::counting_iterator<int64_t>(0),
                   thrust::counting_iterator<int64_t>(b.n_rows),
                   MarginRow<kVals>{{b.row_ptr, b.cols, b.vals, b.bias_slot, nnz_end}, w, out});
}

}  // namespace

double linear_gradient(Loss loss, const CsrBatch& batch, const float* w, int64_t n_slots, float l2,
                       float* grad, float* margins) {
  if (batch.bias_slot >= n_slots) {
    throw std::invalid_argument("parafab::kernels::linear_gradient: bias_slot " +
                                std::to_string(batch.bias_slot) + " outside the " +
                                std::to_string(n_slots) + " slots");
  }
  if (batch.n_rows <= 0) {
    init_l2(w, n_slots, l2, grad);
    return 0.0;
  }
  const double sum = loss == Loss::kLogistic
                         ? gradient_sum<Loss::kLogistic>(batch, w, n_slots, l2, grad, margins)
                         : gradient_sum<Loss::kHinge>(batch, w, n_slots, l2, grad, margins);
  return sum / static_cast<double>(batch.n_rows);
}

void linear_margins(const CsrBatch& batch, const float* w, float* out) {
  if (batch.n_rows <= 0) return;
  if (batch.vals != nullptr) {
    margins_impl<true>(batch, w, out);
  } else {
    margins_impl<false>(batch, w, out);
  }
}

void sigmoid(const float* margins, int64_t n, float* out) {
  if (n <= 0) return;
  thrust::transform(policy(), margins, margins + n, out, Sigmoid{});
}

}  // namespace parafab::kernels
