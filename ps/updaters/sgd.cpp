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
  if (l1 == 0.0 && l2 == 0.0) {
    // Without regularization the formula below gives, bit for bit, u + 0.0
    // with u = w - lr * g for a finite w, and +0.0 for an infinite or NaN w:
    // g' is g (+0 for g = -0, which changes only the sign of a zero u) when w
    // is finite and NaN (0 * w) when it is not; the threshold at 0 keeps every
    // nonzero u and turns a zero of either sign, or a NaN, into +0.0. Fewer
    // operations per coordinate: a 1 MiB dense push's apply takes about 11%
    // less (226 against 254 us, alternating, one thread).
    return run_step(mode, grad, width, [&](size_t i, auto write) {
      const double w = value[i];
      const double u = (w - lr * static_cast<double>(grad[i])) + 0.0;
      const double w_new = std::fabs(w) <= DBL_MAX ? u : 0.0;
      if constexpr (decltype(write)::value) {
        value[i] = static_cast<float>(w_new);
        return int{!float_is_finite(value[i])};
      } else {
        return int{!fits_float(w_new)};
      }
    });
  }
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
