// Duplicate-key compaction: sort, then sum the rows of equal keys.
//
//   1. perm = 0..n-1; stable_sort_by_key(copy of keys, perm): equal keys end up
//      adjacent, in input order. On the host the sums below then add in input
//      order and do not depend on the sort's internals; on CUDA reduce_by_key
//      groups the additions by tiles, so its sums are the same from run to run
//      but may differ from the host's in the last bits.
//   2. width 1: reduce_by_key over the sorted keys with vals gathered through
//      perm, straight into out_keys / out_vals.
//      width > 1: unique_by_key_copy gives each unique key and the position of
//      its first occurrence (segment starts); then one task per (key, column)
//      sums its segment of rows. Tasks of one key write adjacent floats.
// The temporaries (sorted keys, perm, segment starts) are 16 bytes per key.
#include "kernels/key_compaction.h"

#include <thrust/copy.h>
#include <thrust/for_each.h>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/iterator/permutation_iterator.h>
#include <thrust/pair.h>
#include <thrust/reduce.h>
#include <thrust/sequence.h>
#include <thrust/sort.h>
#include <thrust/unique.h>

#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>

#include "kernels/host_device.h"
#include "kernels/thrust_backend.h"

namespace parafab::kernels {
namespace {

using detail::policy;
using Index = uint32_t;

struct SumSegment {
  const Index* perm;
  const Index* seg_start;
  const float* vals;
  size_t n;
  size_t n_unique;
  int width;
  float* out_vals;

  PARAFAB_HD void operator()(size_t t) const {
    const size_t k = t / static_cast<size_t>(width);
    const size_t c = t % static_cast<size_t>(width);
    const size_t begin = seg_start[k];
    const size_t end = k + 1 < n_unique ? seg_start[k + 1] : n;
    float sum = 0.0f;
    for (size_t i = begin; i < end; ++i) {
      sum += vals[static_cast<size_t>(perm[i]) * static_cast<size_t>(width) + c];
    }
    out_vals[t] = sum;
  }
};

}  // namespace

size_t compact_keys(const uint64_t* keys, const float* vals, size_t n, int width,
                    uint64_t* out_keys, float* out_vals) {
  if (width < 1) {
    throw std::invalid_argument("parafab::kernels::compact_keys: width must be >= 1, got " +
                                std::to_string(width));
  }
  if (n > std::numeric_limits<Index>::max()) {
    throw std::invalid_argument("parafab::kernels::compact_keys: " + std::to_string(n) +
                                " keys exceed the 32-bit permutation");
  }
  if (n == 0) return 0;

  detail::Scratch<uint64_t> sorted(n);
  detail::Scratch<Index> perm(n);
  thrust::copy(policy(), keys, keys + n, sorted.get());
  thrust::sequence(policy(), perm.get(), perm.get() + n);
  thrust::stable_sort_by_key(policy(), sorted.get(), sorted.get() + n, perm.get());

  if (width == 1) {
    const auto ends = thrust::reduce_by_key(policy(), sorted.get(), sorted.get() + n,
                                            thrust::make_permutation_iterator(vals, perm.get()),
                                            out_keys, out_vals);
    return static_cast<size_t>(ends.first - out_keys);
  }

  detail::Scratch<Index> seg_start(n);
  const auto ends =
      thrust::unique_by_key_copy(policy(), sorted.get(), sorted.get() + n,
                                 thrust::counting_iterator<Index>(0), out_keys, seg_start.get());
  const auto n_unique = static_cast<size_t>(ends.first - out_keys);
  thrust::for_each(policy(), thrust::counting_iterator<size_t>(0),
                   thrust::counting_iterator<size_t>(n_unique * static_cast<size_t>(width)),
                   SumSegment{perm.get(), seg_start.get(), vals, n, n_unique, width, out_vals});
  return n_unique;
}

}  // namespace parafab::kernels
