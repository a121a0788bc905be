// Private to ps/: width-1 SGD and AdaGrad steps the tables inline into their
// per-key loops. Each is apply_update's arithmetic for width 1 written once
// more (same double operations in the same order, same checks), so the
// outcome is bit-identical to apply_update: tests/ps/sparse_table_test.cpp
// compares the two on random inputs, refusals included. The gradient must
// already be known finite (the caller counts non-finite ones).
#pragma once

#include <cmath>

#include "ps/updater.h"
#include "ps/updaters/updater_steps.h"

namespace parafab::ps::updaters {

// The hyperparameters as the doubles the step functions compute with.
struct Width1Params {
  double lr, l1, l2, eps;
  explicit Width1Params(const UpdaterConfig& c)
      : lr(c.learning_rate), l1(c.l1), l2(c.l2), eps(c.adagrad_epsilon) {}
};

// sgd_step for width 1. False (nothing written) when the result would not fit.
inline bool sgd_step_w1(const Width1Params& p, float* value, float grad) {
  const double w = *value;
  const double g = static_cast<double>(grad) + p.l2 * w;
  const double w_new = soft_threshold_select(w - p.lr * g, p.lr * p.l1);
  if (!fits_float(w_new)) return false;
  *value = static_cast<float>(w_new);
  return true;
}

// adagrad_step for width 1; acc is the key's accumulator.
inline bool adagrad_step_w1(const Width1Params& p, float* value, float* acc, float grad) {
  const double w = *value;
  const double g = static_cast<double>(grad) + p.l2 * w;
  const double G = static_cast<double>(*acc) + g * g;
  const double eta = p.lr / (p.eps + std::sqrt(G));
  const double w_new = soft_threshold_select(w - eta * g, eta * p.l1);
  if (!fits_float(G) || !fits_float(w_new)) return false;
  *acc = static_cast<float>(G);
  *value = static_cast<float>(w_new);
  return true;
}

}  // namespace parafab::ps::updaters
