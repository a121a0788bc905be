// Private to ps/: one step function per updater, called by apply_update
// (ps/updater.cpp) twice per key: first with commit = false to check that
// every new float is finite and fits a float (nothing is written), then with
// commit = true to write. Both passes compute the same doubles, so the check
// covers exactly what the commit writes. The gradient is already known finite.
#pragma once

#include <cfloat>
#include <cmath>
#include <cstddef>

#include "ps/updater.h"

namespace parafab::ps::updaters {

// False for NaN, infinities, and finite doubles that would overflow a float.
inline bool fits_float(double x) { return std::fabs(x) <= static_cast<double>(FLT_MAX); }

// prox of t * |w| at u: sign(u) * max(|u| - t, 0).
inline double soft_threshold(double u, double t) {
  if (u > t) return u - t;
  if (u < -t) return u + t;
  return 0.0;
}

// Each returns false (only possible when !commit) if some new float would not
// be finite; with commit it writes value and state and returns true.
bool sgd_step(const UpdaterConfig& c, float* value, const float* grad, size_t width, bool commit);
bool adagrad_step(const UpdaterConfig& c, float* value, float* state, const float* grad, size_t width,
                  bool commit);
bool ftrl_step(const UpdaterConfig& c, float* value, float* state, const float* grad, size_t width,
               bool commit);
bool adam_step(const UpdaterConfig& c, float* value, float* state, const float* grad, size_t width,
               bool commit);

void ftrl_initialize(const UpdaterConfig& c, const float* value, float* state, size_t width);

}  // namespace parafab::ps::updaters
