// Minibatch gradient of a sparse linear model (logistic or hinge loss, L2).
//
//   kernels::CsrBatch b{...};                       // backend memory
//   double loss = kernels::linear_gradient(Loss::kLogistic, b, w, n_slots, l2, grad, margins);
//
// grad[j] = (1/n) * sum_i dloss(y_i, m_i) * x_ij + l2 * w[j]  for every slot j,
// where m_i = sum_j w[j] x_ij (+ w[bias_slot]). The L2 term covers exactly the
// n_slots slots given: the worker passes the keys of this batch, so L2 is
// applied lazily to the coordinates the batch touches.
#pragma once

#include <cstdint>

#include "kernels/csr_batch.h"

namespace parafab::kernels {

// Overwrites grad[0, n_slots). If margins is not null, writes m_i per row.
// Returns the mean loss of the batch at w (before any update), with the
// L2 penalty not included. An empty batch gives grad = l2 * w and loss 0.
[[nodiscard]] double linear_gradient(Loss loss, const CsrBatch& batch, const float* w,
                                     int64_t n_slots, float l2, float* grad, float* margins);

// m_i = sum_j w[j] x_ij (+ bias) for every row; out has batch.n_rows entries.
void linear_margins(const CsrBatch& batch, const float* w, float* out);

// p_i = sigmoid(m_i), numerically stable for any m_i.
void sigmoid(const float* margins, int64_t n, float* out);

}  // namespace parafab::kernels
