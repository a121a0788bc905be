// Private to ps/: one step function per updater. Each computes every
// coordinate's new value (and state) in double precision, in one of three
// modes (StepMode): apply_update (ps/updater.cpp) calls it twice per key,
// first to check that every new float is finite and fits a float (nothing is
// written), then to write; apply_update_to_copy calls it once, writing a
// scratch copy and counting the misfits of what it writes in the same pass.
// Every mode computes the same doubles in the same order, so the check
// covers exactly what the commit writes.
#pragma once

#include <cfloat>
#include <cmath>
#include <cstddef>
#include <type_traits>

#include "ps/updater.h"

namespace parafab::ps::updaters {

// False for NaN, infinities, and finite doubles that would overflow a float.
inline bool fits_float(double x) { return std::fabs(x) <= static_cast<double>(FLT_MAX); }

// False for NaN and infinities. The written floats of kCommitChecked are
// tested with it, in float lanes: testing the doubles before the cast
// needed mask conversions between double and float lanes (1 MiB SGD apply:
// 203 -> 166 us). A result that rounds down to FLT_MAX passes here and
// fails fits_float; both refuse every result that is not a finite float.
inline bool float_is_finite(float x) { return std::fabs(x) <= FLT_MAX; }

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

enum class StepMode {
  kCheck,          // write nothing; false if some new float would not fit
  kCommit,         // write value and state; true (the check has passed)
  kCommitChecked,  // write, and false if some written float, or some
                   // gradient float, is not finite: for copies, which the
                   // caller drops when refused
};

// The loop of every step function: coordinate(i, write) computes coordinate
// i and returns how many of its new floats do not fit (0, 1, ...): with
// `write` std::false_type by fits_float on the doubles; with std::true_type
// it writes them and counts by float_is_finite on the floats written. The counting loops carry no branch and
// no early exit, so they vectorize (a dense row is thousands of coordinates).
// Always inlined, so that the loops take the calling clone's instruction set
// (not inlined, GCC built them once, for the baseline, and did not
// vectorize them: Adam's 1 MiB dense apply ran 3x slower).
template <typename Coordinate>
[[gnu::always_inline]] inline bool run_step(StepMode mode, const float* grad, size_t width, Coordinate&& coordinate) {
  int misfits = 0;
  switch (mode) {
    case StepMode::kCheck:
#pragma omp simd reduction(+ : misfits)
      for (size_t i = 0; i < width; ++i) misfits += coordinate(i, std::false_type{});
      break;
    case StepMode::kCommit:
      for (size_t i = 0; i < width; ++i) (void)coordinate(i, std::true_type{});
      break;
    case StepMode::kCommitChecked:
#pragma omp simd reduction(+ : misfits)
      for (size_t i = 0; i < width; ++i) misfits += coordinate(i, std::true_type{}) + !float_is_finite(grad[i]);
      break;
  }
  return misfits == 0;
}

// Each returns what run_step returns. The gradient is known finite for
// kCheck and kCommit (apply_update checks it first).
bool sgd_step(const UpdaterConfig& c, float* value, const float* grad, size_t width, StepMode mode);
bool adagrad_step(const UpdaterConfig& c, float* value, float* state, const float* grad, size_t width,
                  StepMode mode);
bool ftrl_step(const UpdaterConfig& c, float* value, float* state, const float* grad, size_t width,
               StepMode mode);
bool adam_step(const UpdaterConfig& c, float* value, float* state, const float* grad, size_t width,
               StepMode mode);

void ftrl_initialize(const UpdaterConfig& c, const float* value, float* state, size_t width);

}  // namespace parafab::ps::updaters
