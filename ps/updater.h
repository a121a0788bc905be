// Updaters: how a server folds a pushed gradient into one key's value.
//
//   ps::UpdaterConfig cfg{.kind = ps::UpdaterKind::kFtrl};
//   cfg.validate();                                    // once, at table creation
//   std::vector<float> state(ps::state_floats_per_key(cfg.kind, width));
//   ps::initialize_state(cfg, value, state.data(), width);
//   ...
//   if (ps::apply_update(cfg, value, state.data(), grad, width) != ps::UpdateStatus::kApplied)
//     ++refused;                                       // value and state untouched
//
// A key's value is `width` floats; its optimizer state (`state_floats_per_key`
// floats) lives beside it on the server. The state is planar: slot s of
// coordinate i is state[s * width + i] (AdaGrad: accumulator; FTRL: z, then
// n; Adam: m, then v), and Adam keeps one more float at state[2 * width]: the
// key's own step count.
//
// Invariants apply_update keeps:
// - All or nothing per key: it computes every new float first and writes only
//   when every one of them is finite and fits a float; otherwise it returns a
//   refusal and leaves value and state bit-for-bit as they were. So a NaN or
//   infinite gradient (or one whose square overflows) never reaches the model.
// - Arithmetic is in double per coordinate, stored as float: g^2 of any finite
//   float fits, and FTRL's sigma is computed without cancellation.
// - FTRL's value is always the closed form of its stored (z, n) (McMahan et al.
//   2013, Algorithm 1), so pulls read w directly, with no lazy evaluation.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace parafab::ps {

enum class UpdaterKind {
  kSgd,      // w -= lr * g, proximal L1
  kAdaGrad,  // per-coordinate steps lr / (eps + sqrt(sum g^2)), Duchi et al. 2011
  kFtrl,     // FTRL-Proximal, McMahan et al. KDD 2013
  kAdam,     // Kingma & Ba 2015, bias-corrected per key
};

const char* to_string(UpdaterKind kind);  // "sgd", "adagrad", "ftrl", "adam"
// Inverse of to_string; throws std::invalid_argument naming the text.
UpdaterKind parse_updater_kind(std::string_view name);

// A table's updater and its hyperparameters. Defaults are valid for every
// kind. l1/l2 serve SGD, AdaGrad and Adam; FTRL has its own ftrl_l1/ftrl_l2
// (and validate() refuses a non-zero l1/l2 on an FTRL table, which is almost
// surely meant as ftrl_l1/ftrl_l2).
struct UpdaterConfig {
  UpdaterKind kind = UpdaterKind::kSgd;

  // SGD, AdaGrad, Adam: the step size (Adam's alpha).
  float learning_rate = 0.01f;
  // SGD, AdaGrad: L1 strength, applied as a proximal (soft-threshold) step, so
  // weights reach exact zeros. Adam: must be 0 (Adam has no standard proximal
  // form; use FTRL for sparse models).
  float l1 = 0.0f;
  // SGD, AdaGrad, Adam: L2 strength, added to the gradient (g + l2 * w);
  // for Adam this is the original coupled L2, not AdamW's decoupled decay.
  float l2 = 0.0f;

  // AdaGrad: eta = learning_rate / (adagrad_epsilon + sqrt(accumulator)),
  // the accumulator starting at adagrad_initial_accumulator (TensorFlow's
  // default 0.1, which damps the first steps).
  float adagrad_epsilon = 1e-7f;
  float adagrad_initial_accumulator = 0.1f;

  // FTRL-Proximal: per-coordinate rate alpha / (beta + sqrt(n)); L1 and L2
  // strengths. Defaults are the paper's beta = 1 and common CTR settings.
  float ftrl_alpha = 0.1f;
  float ftrl_beta = 1.0f;
  float ftrl_l1 = 1.0f;
  float ftrl_l2 = 1.0f;

  // Adam: moment decay rates and the denominator's epsilon (the paper's).
  float adam_beta1 = 0.9f;
  float adam_beta2 = 0.999f;
  float adam_epsilon = 1e-8f;

  // Throws std::invalid_argument naming the first bad field and its value,
  // e.g. "UpdaterConfig: ftrl_alpha = -1 must be > 0". Every field is
  // checked whatever the kind (a stray value is a mistake worth reporting).
  void validate() const;
};

// One line for start-up logs: the kind and the fields it uses.
std::string to_string(const UpdaterConfig& config);

// Optimizer state floats per value float: SGD 0, AdaGrad 1, FTRL 2, Adam 2.
size_t state_floats_per_value(UpdaterKind kind);
// Whole state of one key: per_value * width, plus 1 for Adam's step count.
size_t state_floats_per_key(UpdaterKind kind, size_t width);

// Fills a key's state for the value it starts with (the table's initializer
// has already written value). AdaGrad: the initial accumulator. Adam: zero
// moments and step. FTRL: n = 0 and z chosen so the closed form gives back
// the initial value (z = 0 for a zero value), so random initial embeddings
// work with FTRL too. config must be valid.
void initialize_state(const UpdaterConfig& config, const float* value, float* state, size_t width);

// True when none of x[0, n) is NaN or infinite.
bool all_finite(const float* x, size_t n);

enum class [[nodiscard]] UpdateStatus {
  kApplied,
  kNonFiniteGradient,  // a gradient float is NaN or infinite
  kNonFiniteResult,    // a finite gradient would make a value or state float
                       // NaN, infinite, or beyond float range (or they already were)
};
const char* to_string(UpdateStatus status);

// Applies one pushed gradient grad[0, width) to one key. Each call is one
// step (Adam's per-key step count advances by one); callers merge duplicate
// keys of one push before. Not thread-safe for the same key: the server
// serializes updates of a key. config must be valid.
UpdateStatus apply_update(const UpdaterConfig& config, float* value, float* state, const float* grad,
                          size_t width);

// apply_update for a caller that updates copies of a key's value and state
// (DenseTable's scratch row) and keeps its originals until this says
// kApplied: one pass computes and writes the copies and checks the gradient
// and every new float (apply_update computes twice, checking first, to
// leave its arguments untouched). Applied, the copies hold exactly what
// apply_update writes; refused (for what apply_update refuses), they hold
// garbage to drop.
UpdateStatus apply_update_to_copy(const UpdaterConfig& config, float* value, float* state, const float* grad,
                                  size_t width);

}  // namespace parafab::ps
