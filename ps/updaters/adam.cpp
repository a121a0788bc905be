// Adam, Kingma & Ba, ICLR 2015, Algorithm 1, with the step count t kept per
// key (state[2 * width]):
//   t += 1
//   g' = g + l2 * w                        (coupled L2, not AdamW)
//   m  = beta1 * m + (1 - beta1) * g'
//   v  = beta2 * v + (1 - beta2) * g'^2
//   w -= lr * (m / (1 - beta1^t)) / (sqrt(v / (1 - beta2^t)) + eps)
// Why per key and not the server's clock: a sparse key first pushed at clock
// 1000 would get no bias correction, and its first step would be
// lr * (1 - beta1) / sqrt(1 - beta2) ~ 3.2 * lr instead of lr. The count is a
// float, exact up to 2^24 and then held there: by then beta^t < e^-16 for any
// beta <= 1 - 1e-6, so both corrections are within float rounding of 1.
// State: m[0, width), v[0, width), t.
#include "ps/updaters/updater_steps.h"

namespace parafab::ps::updaters {

namespace {
constexpr float kMaxStep = 16777216.0f;  // 2^24
}  // namespace

PARAFAB_UPDATER_CLONES bool adam_step(const UpdaterConfig& c, float* value, float* state, const float* grad,
                                      size_t width, StepMode mode) {
  const double lr = c.learning_rate, l2 = c.l2, b1 = c.adam_beta1, b2 = c.adam_beta2, eps = c.adam_epsilon;
  float* m = state;
  float* v = state + width;
  float& t_slot = state[2 * width];
  const float t = t_slot < kMaxStep ? t_slot + 1.0f : kMaxStep;
  const double correction1 = 1.0 - std::pow(b1, static_cast<double>(t));
  const double correction2 = 1.0 - std::pow(b2, static_cast<double>(t));
  const bool ok = run_step(mode, grad, width, [&](size_t i, auto write) {
    const double w = value[i];
    const double g = static_cast<double>(grad[i]) + l2 * w;
    const double m_new = b1 * m[i] + (1.0 - b1) * g;
    const double v_new = b2 * v[i] + (1.0 - b2) * g * g;
    const double w_new = w - lr * (m_new / correction1) / (std::sqrt(v_new / correction2) + eps);
    if constexpr (decltype(write)::value) {
      m[i] = static_cast<float>(m_new);
      v[i] = static_cast<float>(v_new);
      value[i] = static_cast<float>(w_new);
      return !float_is_finite(m[i]) + !float_is_finite(v[i]) + !float_is_finite(value[i]);
    } else {
      return !fits_float(m_new) + !fits_float(v_new) + !fits_float(w_new);
    }
  });
  if (mode != StepMode::kCheck) t_slot = t;
  return ok;
}

}  // namespace parafab::ps::updaters
