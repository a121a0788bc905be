// Width-1 SGD and AdaGrad steps over a block of keys gathered from a sparse
// table (see batched_width1.h). Built like the dense steps: no errno from
// sqrt, selects if-converted, an AVX2 clone, so the loops vectorize and the
// square roots and divisions of a block overlap instead of each key waiting
// on its own.
#include "ps/updaters/batched_width1.h"

#include <algorithm>

namespace parafab::ps::updaters {

PARAFAB_UPDATER_CLONES int sgd_block_w1(const Width1Params& p, float* value, const float* grad, size_t n) {
  const double lr = p.lr, l1 = p.l1, l2 = p.l2;  // locals: stores to value cannot change them
  int misfits = 0;
#pragma omp simd reduction(+ : misfits)
  for (size_t k = 0; k < n; ++k) {
    const double w = value[k];
    const double g = static_cast<double>(grad[k]) + l2 * w;
    const double w_new = soft_threshold_select(w - lr * g, lr * l1);
    const bool fits = fits_float(w_new);
    misfits += !fits;
    // A misfit keeps its float's bits: through a double a signaling NaN
    // (only a restore puts one there) would come back quieted.
    value[k] = fits ? static_cast<float>(w_new) : value[k];
  }
  return misfits;
}

// Two loops: GCC 12 vectorizes neither the step with its checks nor the
// checks with the step in one loop (the soft threshold's select and the fit
// selects together), but each alone.
PARAFAB_UPDATER_CLONES int adagrad_block_w1(const Width1Params& p, float* value, float* acc, const float* grad,
                                            size_t n) {
  const double lr = p.lr, l1 = p.l1, l2 = p.l2, eps = p.eps;
  double G_new[kWidth1Block], w_new[kWidth1Block];
  n = std::min(n, kWidth1Block);
#pragma omp simd
  for (size_t k = 0; k < n; ++k) {
    const double w = value[k];
    const double g = static_cast<double>(grad[k]) + l2 * w;
    const double G = static_cast<double>(acc[k]) + g * g;
    const double eta = lr / (eps + std::sqrt(G));
    G_new[k] = G;
    w_new[k] = soft_threshold_select(w - eta * g, eta * l1);
  }
  int misfits = 0;
#pragma omp simd reduction(+ : misfits)
  for (size_t k = 0; k < n; ++k) {
    const bool fits = fits_float(G_new[k]) & fits_float(w_new[k]);
    misfits += !fits;
    // A misfit keeps its floats' bits (see sgd_block_w1).
    acc[k] = fits ? static_cast<float>(G_new[k]) : acc[k];
    value[k] = fits ? static_cast<float>(w_new[k]) : value[k];
  }
  return misfits;
}

}  // namespace parafab::ps::updaters
