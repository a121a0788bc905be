// Diagonal AdaGrad (Duchi, Hazan, Singer, JMLR 2011, composite mirror descent
// with H = delta I + diag(sqrt(G)), section 5.1), per coordinate:
//   g'  = g + l2 * w                       (L2 as part of the loss)
//   G  += g'^2                             (starts at adagrad_initial_accumulator)
//   eta = lr / (adagrad_epsilon + sqrt(G))
//   w   = soft_threshold(w - eta * g', eta * l1)
// State: G[0, width).
#include "ps/updaters/updater_steps.h"

namespace parafab::ps::updaters {

PARAFAB_UPDATER_CLONES bool adagrad_step(const UpdaterConfig& c, float* value, float* state, const float* grad, size_t width,
                  bool commit) {
  const double lr = c.learning_rate, l1 = c.l1, l2 = c.l2, eps = c.adagrad_epsilon;
  float* acc = state;
  // As sgd_step: two loops without branches, so that both vectorize.
  if (!commit) {
    int misfits = 0;
#pragma omp simd reduction(+ : misfits)
    for (size_t i = 0; i < width; ++i) {
      const double w = value[i];
      const double g = static_cast<double>(grad[i]) + l2 * w;
      const double G = static_cast<double>(acc[i]) + g * g;
      const double eta = lr / (eps + std::sqrt(G));
      misfits += !fits_float(G) + !fits_float(soft_threshold_select(w - eta * g, eta * l1));
    }
    return misfits == 0;
  }
  for (size_t i = 0; i < width; ++i) {
    const double w = value[i];
    const double g = static_cast<double>(grad[i]) + l2 * w;
    const double G = static_cast<double>(acc[i]) + g * g;
    const double eta = lr / (eps + std::sqrt(G));
    acc[i] = static_cast<float>(G);
    value[i] = static_cast<float>(soft_threshold_select(w - eta * g, eta * l1));
  }
  return true;
}

}  // namespace parafab::ps::updaters
