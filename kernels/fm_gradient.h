// Minibatch gradient of a sparse factorization machine (Rendle 2010) with the
// logistic loss and L2.
//
//   kernels::CsrBatch b{...};                               // backend memory
//   double loss = kernels::fm_gradient(b, params, n_slots, k, l2, grad, margins);
//
// Local slot j owns 1 + k floats at params[j * (1 + k)]: its weight w_j, then
// its factors v_j[0, k). The margin of row i is
//   m_i = sum_j x_ij w_j + 1/2 sum_f [ (sum_j x_ij v_jf)^2 - sum_j x_ij^2 v_jf^2 ]
//         (+ w[bias_slot])
// where the sums run over the row's nonzeros, each on its own: a slot that
// occurs twice in a row is two features that happen to share parameters. The
// implicit bias feature has no factors; the bias slot's v only takes L2 (a row
// that names bias_slot as a column uses it like any other slot). With
// S_f = sum_j x_ij v_jf, a nonzero x_j contributes dm/dw_j = x_j and
// dm/dv_jf = x_j (S_f - v_jf x_j). With k = 0 this is linear_gradient with
// Loss::kLogistic.
#pragma once

#include <cstdint>

#include "kernels/csr_batch.h"

namespace parafab::kernels {

// Largest number of factors k: the kernels keep a row's S_f in a local array.
inline constexpr int kFmMaxFactors = 256;

// Overwrites grad[0, n_slots * (1 + k)) with
//   (1/n) sum_i dloss(y_i, m_i) dm_i/dparam + l2 * param
// for every parameter of the n_slots slots given (L2 covers exactly these, as
// in linear_gradient). If margins is not null, writes m_i per row. Returns the
// mean log loss of the batch at params (before any update), L2 not included,
// summed in double. An empty batch gives grad = l2 * params and loss 0.
// Throws std::invalid_argument for k outside [0, kFmMaxFactors], negative
// n_slots or n_rows, or bias_slot >= n_slots.
[[nodiscard]] double fm_gradient(const CsrBatch& batch, const float* params, int64_t n_slots,
                                 int k, float l2, float* grad, float* margins);

// m_i for every row; out has batch.n_rows entries. Same checks on k and n_rows.
void fm_margins(const CsrBatch& batch, const float* params, int k, float* out);

}  // namespace parafab::kernels
