// Private to ps/: width-1 SGD and AdaGrad steps over a block of keys the
// sparse table has gathered. Each is apply_update's arithmetic for width 1
// written once more (same double operations in the same order, same
// checks), so the outcome is bit-identical to apply_update:
// tests/ps/sparse_table_test.cpp compares the two on random inputs,
// refusals included. The gradients must already be known finite (the
// caller counts non-finite ones).
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

// sgd_step and adagrad_step (acc: each key's accumulator) over a block of
// n <= kWidth1Block keys gathered into arrays (adagrad_block_w1 steps only
// the first kWidth1Block): each key's value (and acc) is updated in place
// where its result fits and left as it was otherwise; returns how many did
// not fit (width1_block.cpp, built with the dense steps' flags).
inline constexpr size_t kWidth1Block = 64;
int sgd_block_w1(const Width1Params& p, float* value, const float* grad, size_t n);
int adagrad_block_w1(const Width1Params& p, float* value, float* acc, const float* grad, size_t n);

}  // namespace parafab::ps::updaters
