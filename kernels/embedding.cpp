// Per-field embedding bags: the gather of the inputs and the scatter of their
// gradient into the embedding table.
//
// Gather: every output entry belongs to one row, so the tasks share nothing.
// On CUDA a task is one (row, lane j in [0, d)) pair: neighbouring threads
// then read neighbouring floats of an embedding row and write neighbouring
// floats of the output (coalesced), and a batch of a few thousand rows still
// fills the GPU. On the host a task is a row, with the d lanes as the inner
// (vectorizable) loop.
//
// Scatter: rows of grad_E are shared by every batch row that names the slot
// (the same key in many examples), so the two backends differ:
//
//  - CUDA: the gather's (row, lane) tasks add into grad_E with relaxed atomic
//    adds (kernels/atomics.h). Every addition lands exactly once; relaxed
//    order is enough because nothing reads grad_E before the call returns.
//
//  - host: x86 has no float atomic add (each would be a lock cmpxchg loop), and
//    privatizing per thread costs threads x n_slots x d floats to clear and
//    add up, more than the work itself when most of a batch's keys are rare.
//    Instead the nonzeros are sorted by slot (a stable sort, so a slot's
//    nonzeros stay in batch order) and one task per slot sums its nonzeros
//    into its own row of grad_E: no shared writes, no atomics, and a result
//    that does not depend on the number of threads. Extra memory: 20 bytes a
//    nonzero. The slots are split statically over the threads, so a slot that
//    carries a large share of the batch's nonzeros is summed by one thread.
#include "kernels/embedding.h"

#include <thrust/copy.h>
#include <thrust/for_each.h>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/sequence.h>
#include <thrust/sort.h>

#include <cstdint>
#include <stdexcept>
#include <string>

#include "kernels/host_device.h"
#include "kernels/memory.h"
#include "kernels/thrust_backend.h"
#include "parafab/config.h"

#if PARAFAB_CUDA
#include "kernels/atomics.h"
#endif

namespace parafab::kernels {
namespace {

using detail::policy;

#if PARAFAB_CUDA
constexpr bool kHostBackend = false;
#else
constexpr bool kHostBackend = true;
#endif

PARAFAB_HD inline float value_of(const FieldCsr& b, uint64_t k) {
  return b.vals != nullptr ? b.vals[k] : 1.0f;
}

// Task t: row t with every lane (host), or row t / d, lane t % d (CUDA).
struct GatherTask {
  FieldCsr b;
  const float* E;
  int d;
  float* out;

  PARAFAB_HD void operator()(int64_t t) const {
    int64_t i = t;
    int j0 = 0;
    int j1 = d;
    if constexpr (!kHostBackend) {
      i = t / d;
      j0 = static_cast<int>(t % d);
      j1 = j0 + 1;
    }
    float* o = out + i * (int64_t{b.n_fields} * d);
    for (int f = 0; f < b.n_fields; ++f) {
      for (int j = j0; j < j1; ++j) o[int64_t{f} * d + j] = 0.0f;
    }
    const uint64_t end = b.row_ptr[i + 1];
    for (uint64_t k = b.row_ptr[i]; k < end; ++k) {
      const int f = b.fields[k];
      if (f >= b.n_fields) continue;  // broken precondition: never write past the row
      const float v = value_of(b, k);
      const float* e = E + int64_t{b.cols[k]} * d;
      float* dst = o + int64_t{f} * d;
      for (int j = j0; j < j1; ++j) dst[j] += v * e[j];
    }
  }
};

#if PARAFAB_CUDA

struct AtomicScatterTask {
  FieldCsr b;
  const float* d_out;
  int d;
  int64_t n_slots;
  float scale;
  float* grad;

  PARAFAB_HD void operator()(int64_t t) const {
    const int64_t i = t / d;
    const int64_t j = t % d;
    const float* g = d_out + i * (int64_t{b.n_fields} * d) + j;
    const uint64_t end = b.row_ptr[i + 1];
    for (uint64_t k = b.row_ptr[i]; k < end; ++k) {
      const int f = b.fields[k];
      const uint32_t c = b.cols[k];
      if (f >= b.n_fields || c >= n_slots) continue;  // broken precondition
      detail::atomic_add_relaxed(&grad[int64_t{c} * d + j],
                                 scale * value_of(b, k) * g[int64_t{f} * d]);
    }
  }
};

void scatter_atomic(const FieldCsr& b, const float* d_out, int d, int64_t n_slots, float scale,
                    float* grad) {
  device_fill_zero(grad, static_cast<size_t>(n_slots) * static_cast<size_t>(d) * sizeof(float));
  if (b.n_rows == 0) return;
  thrust::for_each(policy(), thrust::counting_iterator<int64_t>(0),
                   thrust::counting_iterator<int64_t>(b.n_rows * d),
                   AtomicScatterTask{b, d_out, d, n_slots, scale, grad});
}

#else  // the host backend

// row_of[k - k0] = the row of nonzero k.
struct RowOfNonzero {
  const uint64_t* row_ptr;
  uint64_t k0;
  int64_t* row_of;
  void operator()(int64_t i) const {
    for (uint64_t k = row_ptr[i]; k < row_ptr[i + 1]; ++k) row_of[k - k0] = i;
  }
};

// Row s of grad_E from the nonzeros of slot s: positions [p, ...) of the
// sorted slot array while slot[p] == s, found by binary search.
struct SlotSumTask {
  FieldCsr b;
  const uint32_t* slot;   // the batch's cols, sorted
  const uint64_t* order;  // order[p]: the nonzero at sorted position p
  const int64_t* row_of;  // indexed by nonzero - k0
  uint64_t k0;
  uint64_t m;  // nonzeros
  const float* d_out;
  int d;
  float scale;
  float* grad;

  void operator()(int64_t s) const {
    float* dst = grad + s * d;
    for (int j = 0; j < d; ++j) dst[j] = 0.0f;
    uint64_t lo = 0;
    uint64_t hi = m;
    while (lo < hi) {
      const uint64_t mid = lo + (hi - lo) / 2;
      if (int64_t{slot[mid]} < s) {
        lo = mid + 1;
      } else {
        hi = mid;
      }
    }
    const int64_t width = int64_t{b.n_fields} * d;
    for (uint64_t p = lo; p < m && int64_t{slot[p]} == s; ++p) {
      const uint64_t k = order[p];
      const int f = b.fields[k];
      if (f >= b.n_fields) continue;  // broken precondition
      const float v = scale * value_of(b, k);
      const float* src = d_out + row_of[k - k0] * width + int64_t{f} * d;
      for (int j = 0; j < d; ++j) dst[j] += v * src[j];
    }
  }
};

void scatter_sorted(const FieldCsr& b, const float* d_out, int d, int64_t n_slots, float scale,
                    float* grad) {
  if (n_slots == 0) return;
  const uint64_t k0 = b.n_rows > 0 ? b.row_ptr[0] : 0;  // host memory on this backend
  const uint64_t m = b.n_rows > 0 ? b.row_ptr[b.n_rows] - k0 : 0;
  detail::Scratch<uint32_t> slot(m);
  detail::Scratch<uint64_t> order(m);
  detail::Scratch<int64_t> row_of(m);
  if (m > 0) {
    thrust::copy(policy(), b.cols + k0, b.cols + k0 + m, slot.get());
    thrust::sequence(policy(), order.get(), order.get() + m, k0);
    thrust::stable_sort_by_key(policy(), slot.get(), slot.get() + m, order.get());
    thrust::for_each(policy(), thrust::counting_iterator<int64_t>(0),
                     thrust::counting_iterator<int64_t>(b.n_rows),
                     RowOfNonzero{b.row_ptr, k0, row_of.get()});
  }
  // Slots past the largest named one (and all of them when m == 0) find an
  // empty range and are only cleared.
  thrust::for_each(
      policy(), thrust::counting_iterator<int64_t>(0), thrust::counting_iterator<int64_t>(n_slots),
      SlotSumTask{b, slot.get(), order.get(), row_of.get(), k0, m, d_out, d, scale, grad});
}

#endif  // PARAFAB_CUDA

void check_sizes(const char* what, const FieldCsr& b, int d) {
  if (d < 1 || b.n_rows < 0 || b.n_fields < 0 || b.n_fields > 256) {
    throw std::invalid_argument(
        std::string("parafab::kernels::") + what + ": d = " + std::to_string(d) +
        " (must be >= 1), n_rows = " + std::to_string(b.n_rows) +
        " (>= 0), n_fields = " + std::to_string(b.n_fields) + " (in [0, 256])");
  }
}

}  // namespace

void embedding_gather(const FieldCsr& batch, const float* E, int d, float* out) {
  check_sizes("embedding_gather", batch, d);
  if (batch.n_rows == 0 || batch.n_fields == 0) return;
  const int64_t tasks = kHostBackend ? batch.n_rows : batch.n_rows * d;
  thrust::for_each(policy(), thrust::counting_iterator<int64_t>(0),
                   thrust::counting_iterator<int64_t>(tasks), GatherTask{batch, E, d, out});
}

void embedding_scatter_add(const FieldCsr& batch, const float* d_out, int d, int64_t n_slots,
                           float scale, float* grad_E) {
  check_sizes("embedding_scatter_add", batch, d);
  if (n_slots < 0) {
    throw std::invalid_argument(
        "parafab::kernels::embedding_scatter_add: n_slots = " + std::to_string(n_slots) + " < 0");
  }
#if PARAFAB_CUDA
  scatter_atomic(batch, d_out, d, n_slots, scale, grad_E);
#else
  scatter_sorted(batch, d_out, d, n_slots, scale, grad_E);
#endif
}

}  // namespace parafab::kernels
