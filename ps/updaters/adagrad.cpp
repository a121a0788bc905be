// Diagonal AdaGrad (Duchi, Hazan, Singer, JMLR 2011, composite mirror descent
// with H = delta I + diag(sqrt(G)), section 5.1), per coordinate:
//   g'  = g + l2 * w                       (L2 as part of the loss)
//   G  += g'^2                             (starts at adagrad_initial_accumulator)
//   eta = lr / (adagrad_epsilon + sqrt(G))
//   w   = soft_threshold(w - eta * g', eta * l1)
// State: G[0, width).
#include "ps/updaters/updater_steps.h"

namespace parafab::ps::updaters {

PARAFAB_UPDATER_CLONES bool adagrad_step(const UpdaterConfig& c, float* value, float* state, const float* grad,
                                         size_t width, StepMode mode) {
  const double lr = c.learning_rate, l1 = c.l1, l2 = c.l2, eps = c.adagrad_epsilon;
  float* acc = state;
  return run_step(mode, grad, width, [&](size_t i, auto write) {
    const double w = value[i];
    const double g = static_cast<double>(grad[i]) + l2 * w;
    const double G = static_cast<double>(acc[i]) + g * g;
    const double eta = lr / (eps + std::sqrt(G));
    const double w_new = soft_threshold_select(w - eta * g, eta * l1);
    if constexpr (decltype(write)::value) {
      acc[i] = static_cast<float>(G);
      value[i] = static_cast<float>(w_new);
      return !float_is_finite(acc[i]) + !float_is_finite(value[i]);
    } else {
      return !fits_float(G) + !fits_float(w_new);
    }
  });
}

}  // namespace parafab::ps::updaters
