// SGD with L2 in the gradient and L1 as a proximal step (ISTA):
//   g' = g + l2 * w
//   w  = soft_threshold(w - lr * g', lr * l1)
// The proximal step puts weights at exact zero instead of letting them
// oscillate around it, as a subgradient step of l1 * |w| would.
#include "ps/updaters/updater_steps.h"

namespace parafab::ps::updaters {

PARAFAB_UPDATER_CLONES bool sgd_step(const UpdaterConfig& c, float* value, const float* grad, size_t width, bool commit) {
  const double lr = c.learning_rate, l1 = c.l1, l2 = c.l2;
  // Two loops without branches or early exits, so that both vectorize (a
  // dense row is thousands of coordinates): the check counts the misfits.
  if (!commit) {
    int misfits = 0;
#pragma omp simd reduction(+ : misfits)
    for (size_t i = 0; i < width; ++i) {
      const double w = value[i];
      const double g = static_cast<double>(grad[i]) + l2 * w;
      misfits += !fits_float(soft_threshold_select(w - lr * g, lr * l1));
    }
    return misfits == 0;
  }
  for (size_t i = 0; i < width; ++i) {
    const double w = value[i];
    const double g = static_cast<double>(grad[i]) + l2 * w;
    value[i] = static_cast<float>(soft_threshold_select(w - lr * g, lr * l1));
  }
  return true;
}

}  // namespace parafab::ps::updaters
