// Loss and ranking metrics as Thrust reductions, accumulated in double.
//
// ROC AUC by the Mann-Whitney statistic with mid-ranks, computed without
// ranks: sort the scores ascending (labels along), reduce_by_key over runs of
// equal scores to (positives, negatives) per distinct score, exclusive-scan
// the negatives, and then
//   U = sum over groups g of pos_g * (negatives below g + neg_g / 2),
//   AUC = U / (P * N).
// A positive tied with a negative counts one half, which is what mid-ranks
// give. All counts are integers, so U is exact up to 2^53.
#include "kernels/metrics.h"

#include <thrust/copy.h>
#include <thrust/count.h>
#include <thrust/functional.h>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/iterator/transform_iterator.h>
#include <thrust/iterator/zip_iterator.h>
#include <thrust/reduce.h>
#include <thrust/scan.h>
#include <thrust/sort.h>
#include <thrust/transform_reduce.h>

#include <cmath>
#include <cstdint>
#include <limits>

#include "kernels/host_device.h"
#include "kernels/thrust_backend.h"

namespace parafab::kernels {
namespace {

using detail::policy;

PARAFAB_HD inline bool is_positive(float label) { return label > 0.5f; }

struct LogLossTerm {
  const float* probs;
  const float* labels;
  PARAFAB_HD double operator()(size_t i) const {
    constexpr double kEps = 1e-15;
    double p = static_cast<double>(probs[i]);
    p = p < kEps ? kEps : (p > 1.0 - kEps ? 1.0 - kEps : p);
    return is_positive(labels[i]) ? -log(p) : -log1p(-p);
  }
};

struct Correct {
  const float* scores;
  const float* labels;
  float threshold;
  PARAFAB_HD bool operator()(size_t i) const {
    return (scores[i] >= threshold) == is_positive(labels[i]);
  }
};

struct IsPositive {
  PARAFAB_HD bool operator()(float label) const { return is_positive(label); }
};

struct Counts {
  int64_t pos;
  int64_t neg;
};

struct ToCounts {
  PARAFAB_HD Counts operator()(float label) const {
    return is_positive(label) ? Counts{1, 0} : Counts{0, 1};
  }
};

struct AddCounts {
  PARAFAB_HD Counts operator()(const Counts& a, const Counts& b) const {
    return {a.pos + b.pos, a.neg + b.neg};
  }
};

struct NegOf {
  PARAFAB_HD int64_t operator()(const Counts& c) const { return c.neg; }
};

struct GroupU {
  const Counts* counts;
  const int64_t* neg_below;
  PARAFAB_HD double operator()(size_t g) const {
    return static_cast<double>(counts[g].pos) *
           (static_cast<double>(neg_below[g]) + 0.5 * static_cast<double>(counts[g].neg));
  }
};

}  // namespace

double log_loss(const float* probs, const float* labels, size_t n) {
  if (n == 0) return 0.0;
  const double sum = thrust::transform_reduce(
      policy(), thrust::counting_iterator<size_t>(0), thrust::counting_iterator<size_t>(n),
      LogLossTerm{probs, labels}, 0.0, thrust::plus<double>());
  return sum / static_cast<double>(n);
}

double roc_auc(const float* scores, const float* labels, size_t n) {
  constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
  if (n == 0) return kNaN;
  const auto n_pos =
      static_cast<int64_t>(thrust::count_if(policy(), labels, labels + n, IsPositive{}));
  const int64_t n_neg = static_cast<int64_t>(n) - n_pos;
  if (n_pos == 0 || n_neg == 0) return kNaN;

  detail::Scratch<float> keys(n);
  detail::Scratch<float> labs(n);
  thrust::copy(policy(), scores, scores + n, keys.get());
  thrust::copy(policy(), labels, labels + n, labs.get());
  thrust::sort_by_key(policy(), keys.get(), keys.get() + n, labs.get());

  detail::Scratch<float> group_keys(n);
  detail::Scratch<Counts> counts(n);
  const auto ends = thrust::reduce_by_key(
      policy(), keys.get(), keys.get() + n, thrust::make_transform_iterator(labs.get(), ToCounts{}),
      group_keys.get(), counts.get(), thrust::equal_to<float>(), AddCounts{});
  const auto groups = static_cast<size_t>(ends.first - group_keys.get());

  detail::Scratch<int64_t> neg_below(groups);
  thrust::exclusive_scan(policy(), thrust::make_transform_iterator(counts.get(), NegOf{}),
                         thrust::make_transform_iterator(counts.get() + groups, NegOf{}),
                         neg_below.get(), int64_t{0});
  const double u = thrust::transform_reduce(
      policy(), thrust::counting_iterator<size_t>(0), thrust::counting_iterator<size_t>(groups),
      GroupU{counts.get(), neg_below.get()}, 0.0, thrust::plus<double>());
  return u / (static_cast<double>(n_pos) * static_cast<double>(n_neg));
}

double accuracy(const float* scores, const float* labels, size_t n, float threshold) {
  if (n == 0) return std::numeric_limits<double>::quiet_NaN();
  const auto correct =
      thrust::count_if(policy(), thrust::counting_iterator<size_t>(0),
                       thrust::counting_iterator<size_t>(n), Correct{scores, labels, threshold});
  return static_cast<double>(correct) / static_cast<double>(n);
}

}  // namespace parafab::kernels
