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

// prox of t * |w| at u: sign(u) * max(|u| - t, 0), without branches: a
// weight's sign after a step is as good as random, so a branch per key is
// often mispredicted, and a branch keeps a dense row's loop from
// vectorizing. For u > t, |u| - t is u - t; for u < -t it is -(u + t)
// exactly (round-to-nearest is symmetric), and copysign restores the sign;
// otherwise (|u| <= t, or u NaN) r > 0 is false and the result is +0.0.
inline double soft_threshold_select(double u, double t) {
  const double r = std::fabs(u) - t;
  return r > 0.0 ? std::copysign(r, u) : 0.0;
}

// On x86-64, each step function is built three times, for AVX-512
// (x86-64-v4), for AVX2 and for the baseline, and the loader picks one per
// machine: GCC vectorizes the check loops' double-precision misfit counts
// only from AVX2 on, and a dense row is thousands of coordinates. The
// AVX-512 clone: 1 MiB dense push, SGD 4.6 -> 5.4 GB/s, AdaGrad 2.2 -> 2.8
// GB/s (one Zen 4 core). The files are built with -ffp-contract=off, so
// every clone rounds each operation alike: the same floats on any machine.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define PARAFAB_UPDATER_CLONES __attribute__((target_clones("arch=x86-64-v4", "avx2", "default")))
#else
#define PARAFAB_UPDATER_CLONES
#endif

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
