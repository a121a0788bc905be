// Asynchronous (Hogwild!) SGD over one batch of sparse examples.
//
//   kernels::SgdParams p{.loss = Loss::kLogistic, .lr = 0.1f, .l2 = 1e-6f, .adagrad = true};
//   double progressive = kernels::hogwild_sgd(p, batch, w, g2, n_slots);
//
// Every row is one SGD step, and rows run in parallel (threads on the host,
// CUDA threads on a GPU). Each step reads the weights it needs, computes the
// loss gradient, and writes the updated weights back with *relaxed atomic*
// loads and stores: two steps that touch the same weight may lose one update
// (the algorithm tolerates that, Niu et al. 2011), but there is no data race
// in the C++ sense, so sanitizers stay clean. With adagrad the step of
// coordinate j is lr / sqrt(g2[j] + eps), g2 accumulating squared gradients.
#pragma once

#include <cstdint>

#include "kernels/csr_batch.h"

namespace parafab::kernels {

struct SgdParams {
  Loss loss = Loss::kLogistic;
  float lr = 0.1f;      // step size (the base rate under AdaGrad)
  float l2 = 0.0f;      // L2 strength per step on the coordinates a row touches
  bool adagrad = true;  // per-coordinate AdaGrad steps; needs g2
  float adagrad_eps = 1e-6f;
};

// Runs one step per row of batch against w[0, n_slots) (and g2 when adagrad).
// Returns the sum over rows of the progressive loss: the loss of row i at the
// weights it read, before its own update (VW's "progressive validation").
[[nodiscard]] double hogwild_sgd(const SgdParams& params, const CsrBatch& batch, float* w,
                                 float* g2, int64_t n_slots);

}  // namespace parafab::kernels
