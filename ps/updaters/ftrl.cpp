// FTRL-Proximal, McMahan et al., "Ad Click Prediction: a View from the
// Trenches", KDD 2013, Algorithm 1, per coordinate i with state (z, n):
//   sigma = (sqrt(n + g^2) - sqrt(n)) / alpha
//   z    += g - sigma * w
//   n    += g^2
//   w     = 0                                                 if |z| <= l1
//         = -(z - sign(z) * l1) / ((beta + sqrt(n)) / alpha + l2)   otherwise
// w here is the stored value: it is always the closed form of the stored
// (z, n), because we recompute it from the float-rounded z and n we store.
// sigma is evaluated as g^2 / (alpha * (sqrt(n + g^2) + sqrt(n))), the same
// number without the cancellation of the difference of square roots.
// State: z[0, width), then n[0, width).
#include "ps/updaters/updater_steps.h"

namespace parafab::ps::updaters {
namespace {

// Selects, not branches (see soft_threshold_select), so that a dense row's
// loop vectorizes; the division is computed either way and discarded.
inline double closed_form_w(double z, double n, double alpha, double beta, double l1, double l2) {
  const double sign_z = z < 0 ? -1.0 : 1.0;
  const double w = -(z - sign_z * l1) / ((beta + std::sqrt(n)) / alpha + l2);
  return std::fabs(z) <= l1 ? 0.0 : w;
}

// One coordinate's new (z, n, w); misfits counts the doubles that do not fit a float.
struct FtrlCoordinate {
  float z, n;
  double w;
  int misfits;
};

inline FtrlCoordinate ftrl_coordinate(double g, double w, double z, double n_old, double alpha, double beta, double l1,
                               double l2) {
  const double g2 = g * g;
  const double n_new = n_old + g2;
  const double sigma_full = g2 / (alpha * (std::sqrt(n_new) + std::sqrt(n_old)));
  const double sigma = g2 == 0.0 ? 0.0 : sigma_full;
  const double z_new = z + g - sigma * w;
  const float z_f = static_cast<float>(z_new);
  const float n_f = static_cast<float>(n_new);
  const double w_new = closed_form_w(z_f, n_f, alpha, beta, l1, l2);
  return {z_f, n_f, w_new, !fits_float(z_new) + !fits_float(n_new) + !fits_float(w_new)};
}

}  // namespace

PARAFAB_UPDATER_CLONES bool ftrl_step(const UpdaterConfig& c, float* value, float* state, const float* grad,
                                      size_t width, StepMode mode) {
  const double alpha = c.ftrl_alpha, beta = c.ftrl_beta, l1 = c.ftrl_l1, l2 = c.ftrl_l2;
  float* z = state;
  float* n = state + width;
  return run_step(mode, grad, width, [&](size_t i, auto write) {
    const FtrlCoordinate x = ftrl_coordinate(grad[i], value[i], z[i], n[i], alpha, beta, l1, l2);
    if constexpr (decltype(write)::value) {
      z[i] = x.z;
      n[i] = x.n;
      value[i] = static_cast<float>(x.w);
      return !float_is_finite(z[i]) + !float_is_finite(n[i]) + !float_is_finite(value[i]);
    } else {
      return x.misfits;
    }
  });
}

void ftrl_initialize(const UpdaterConfig& c, const float* value, float* state, size_t width) {
  const double alpha = c.ftrl_alpha, beta = c.ftrl_beta, l1 = c.ftrl_l1, l2 = c.ftrl_l2;
  float* z = state;
  float* n = state + width;
  for (size_t i = 0; i < width; ++i) {
    const double w = value[i];
    const double sign_w = w > 0 ? 1.0 : (w < 0 ? -1.0 : 0.0);
    z[i] = static_cast<float>(-(w * (beta / alpha + l2) + sign_w * l1));
    n[i] = 0.0f;
  }
}

}  // namespace parafab::ps::updaters
