// SGD with L2 in the gradient and L1 as a proximal step (ISTA):
//   g' = g + l2 * w
//   w  = soft_threshold(w - lr * g', lr * l1)
// The proximal step puts weights at exact zero instead of letting them
// oscillate around it, as a subgradient step of l1 * |w| would.
#include "ps/updaters/updater_steps.h"

namespace parafab::ps::updaters {

PARAFAB_UPDATER_CLONES bool sgd_step(const UpdaterConfig& c, float* value, const float* grad, size_t width,
                                     StepMode mode) {
  const double lr = c.learning_rate, l1 = c.l1, l2 = c.l2;
  return run_step(mode, grad, width, [&](size_t i, auto write) {
    const double w = value[i];
    const double g = static_cast<double>(grad[i]) + l2 * w;
    const double w_new = soft_threshold_select(w - lr * g, lr * l1);
    if constexpr (decltype(write)::value) {
      value[i] = static_cast<float>(w_new);
      return int{!float_is_finite(value[i])};
    } else {
      return int{!fits_float(w_new)};
    }
  });
}

}  // namespace parafab::ps::updaters
