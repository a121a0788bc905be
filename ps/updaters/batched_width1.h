// Private to ps/: width-1 SGD and AdaGrad steps the tables inline into their
// per-key loops. Each is apply_update's arithmetic for width 1 written once
// more (same double operations in the same order, same checks), so the
// outcome is bit-identical to apply_update: tests/ps/sparse_table_test.cpp
// compares the two on random inputs, refusals included. The gradient must
// already be known finite (the caller counts non-finite ones).
#pragma once

#include <cmath>
#include <cstddef>

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

// The same two steps over a block of n <= kWidth1Block keys gathered into
// arrays (adagrad_block_w1 steps only the first kWidth1Block): each key's
// value (and acc) is updated in place where its result fits and left as it
// was otherwise; returns how many did not fit. Bit-identical to the per-key
// functions above (width1_block.cpp, built with the dense steps' flags).
inline constexpr size_t kWidth1Block = 64;
int sgd_block_w1(const Width1Params& p, float* value, const float* grad, size_t n);
int adagrad_block_w1(const Width1Params& p, float* value, float* acc, const float* grad, size_t n);

}  // namespace parafab::ps::updaters
