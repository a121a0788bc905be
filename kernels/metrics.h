// Loss and ranking metrics, reduced on the backend.
//
//   double ll  = kernels::log_loss(probs, labels, n);
//   double auc = kernels::roc_auc(scores, labels, n);
#pragma once

#include <cstddef>

namespace parafab::kernels {

// Mean of -(y log p + (1-y) log(1-p)), labels in {0,1}, p clipped to
// [1e-15, 1 - 1e-15] (scikit-learn's convention). 0 for n == 0.
[[nodiscard]] double log_loss(const float* probs, const float* labels, size_t n);

// Area under the ROC curve: the probability that a random positive scores
// above a random negative, ties counting one half (Mann-Whitney U with
// mid-ranks). NaN when n == 0 or all labels are equal.
[[nodiscard]] double roc_auc(const float* scores, const float* labels, size_t n);

// Fraction of rows where (score >= threshold) == (label > 0.5). NaN when n == 0.
[[nodiscard]] double accuracy(const float* scores, const float* labels, size_t n, float threshold);

}  // namespace parafab::kernels
