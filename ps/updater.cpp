#include "ps/updater.h"

#include <cfloat>
#include <cmath>
#include <sstream>
#include <stdexcept>

#include "ps/updaters/updater_steps.h"

namespace parafab::ps {
namespace {

[[noreturn]] void bad_field(const char* field, float value, const char* rule) {
  std::ostringstream os;
  os << "UpdaterConfig: " << field << " = " << value << " " << rule;
  throw std::invalid_argument(os.str());
}

void require(bool ok, const char* field, float value, const char* rule) {
  if (!ok) bad_field(field, value, rule);
}

// Comparisons with NaN are false, so each `require(x > 0, ...)` also refuses
// NaN; the explicit isfinite refuses infinities.
void require_positive(const char* field, float x) {
  require(std::isfinite(x) && x > 0.0f, field, x, "must be finite and > 0");
}
void require_non_negative(const char* field, float x) {
  require(std::isfinite(x) && x >= 0.0f, field, x, "must be finite and >= 0");
}
void require_unit_interval(const char* field, float x) {
  require(x >= 0.0f && x < 1.0f, field, x, "must be in [0, 1)");
}

}  // namespace

const char* to_string(UpdaterKind kind) {
  switch (kind) {
    case UpdaterKind::kSgd: return "sgd";
    case UpdaterKind::kAdaGrad: return "adagrad";
    case UpdaterKind::kFtrl: return "ftrl";
    case UpdaterKind::kAdam: return "adam";
  }
  return "unknown";
}

UpdaterKind parse_updater_kind(std::string_view name) {
  for (auto k : {UpdaterKind::kSgd, UpdaterKind::kAdaGrad, UpdaterKind::kFtrl, UpdaterKind::kAdam}) {
    if (name == to_string(k)) return k;
  }
  throw std::invalid_argument("unknown updater '" + std::string(name) +
                              "' (expected sgd, adagrad, ftrl or adam)");
}

const char* to_string(UpdateStatus status) {
  switch (status) {
    case UpdateStatus::kApplied: return "applied";
    case UpdateStatus::kNonFiniteGradient: return "non-finite gradient";
    case UpdateStatus::kNonFiniteResult: return "non-finite result";
  }
  return "unknown";
}

void UpdaterConfig::validate() const {
  switch (kind) {
    case UpdaterKind::kSgd:
    case UpdaterKind::kAdaGrad:
    case UpdaterKind::kFtrl:
    case UpdaterKind::kAdam: break;
    default:
      throw std::invalid_argument("UpdaterConfig: kind = " + std::to_string(static_cast<int>(kind)) +
                                  " is not an UpdaterKind");
  }
  require_positive("learning_rate", learning_rate);
  require_non_negative("l1", l1);
  require_non_negative("l2", l2);
  require_non_negative("adagrad_epsilon", adagrad_epsilon);
  require_non_negative("adagrad_initial_accumulator", adagrad_initial_accumulator);
  // Both zero would make the first step of a zero gradient 0 / 0.
  require(adagrad_epsilon > 0.0f || adagrad_initial_accumulator > 0.0f, "adagrad_epsilon", adagrad_epsilon,
          "must be > 0 when adagrad_initial_accumulator is 0");
  require_positive("ftrl_alpha", ftrl_alpha);
  require_non_negative("ftrl_beta", ftrl_beta);
  require_non_negative("ftrl_l1", ftrl_l1);
  require_non_negative("ftrl_l2", ftrl_l2);
  // The closed form divides by beta / alpha + l2 while n is still 0.
  require(ftrl_beta > 0.0f || ftrl_l2 > 0.0f, "ftrl_beta", ftrl_beta, "must be > 0 when ftrl_l2 is 0");
  require_unit_interval("adam_beta1", adam_beta1);
  require_unit_interval("adam_beta2", adam_beta2);
  require_positive("adam_epsilon", adam_epsilon);
  if (kind == UpdaterKind::kFtrl) {
    require(l1 == 0.0f, "l1", l1, "must be 0 for ftrl (set ftrl_l1)");
    require(l2 == 0.0f, "l2", l2, "must be 0 for ftrl (set ftrl_l2)");
  }
  if (kind == UpdaterKind::kAdam) require(l1 == 0.0f, "l1", l1, "must be 0 for adam (no proximal L1; use ftrl)");
}

std::string to_string(const UpdaterConfig& c) {
  std::ostringstream os;
  os << "updater=" << to_string(c.kind);
  switch (c.kind) {
    case UpdaterKind::kSgd:
      os << " learning_rate=" << c.learning_rate << " l1=" << c.l1 << " l2=" << c.l2;
      break;
    case UpdaterKind::kAdaGrad:
      os << " learning_rate=" << c.learning_rate << " l1=" << c.l1 << " l2=" << c.l2
         << " adagrad_epsilon=" << c.adagrad_epsilon
         << " adagrad_initial_accumulator=" << c.adagrad_initial_accumulator;
      break;
    case UpdaterKind::kFtrl:
      os << " ftrl_alpha=" << c.ftrl_alpha << " ftrl_beta=" << c.ftrl_beta << " ftrl_l1=" << c.ftrl_l1
         << " ftrl_l2=" << c.ftrl_l2;
      break;
    case UpdaterKind::kAdam:
      os << " learning_rate=" << c.learning_rate << " l2=" << c.l2 << " adam_beta1=" << c.adam_beta1
         << " adam_beta2=" << c.adam_beta2 << " adam_epsilon=" << c.adam_epsilon;
      break;
  }
  return os.str();
}

size_t state_floats_per_value(UpdaterKind kind) {
  switch (kind) {
    case UpdaterKind::kSgd: return 0;
    case UpdaterKind::kAdaGrad: return 1;
    case UpdaterKind::kFtrl: return 2;
    case UpdaterKind::kAdam: return 2;
  }
  throw std::invalid_argument("state_floats_per_value: kind = " + std::to_string(static_cast<int>(kind)) +
                              " is not an UpdaterKind");
}

size_t state_floats_per_key(UpdaterKind kind, size_t width) {
  return state_floats_per_value(kind) * width + (kind == UpdaterKind::kAdam ? 1 : 0);
}

void initialize_state(const UpdaterConfig& config, const float* value, float* state, size_t width) {
  switch (config.kind) {
    case UpdaterKind::kSgd: return;
    case UpdaterKind::kAdaGrad:
      for (size_t i = 0; i < width; ++i) state[i] = config.adagrad_initial_accumulator;
      return;
    case UpdaterKind::kFtrl: updaters::ftrl_initialize(config, value, state, width); return;
    case UpdaterKind::kAdam:
      for (size_t i = 0; i < 2 * width + 1; ++i) state[i] = 0.0f;
      return;
  }
}

bool all_finite(const float* x, size_t n) {
  int bad = 0;  // no early exit and no branch: the loop vectorizes
  for (size_t i = 0; i < n; ++i) bad |= !(std::fabs(x[i]) <= FLT_MAX);
  return bad == 0;
}

UpdateStatus apply_update_to_copy(const UpdaterConfig& config, float* value, float* state, const float* grad,
                                  size_t width) {
  using updaters::StepMode;
  // One pass: the copies are written and checked together, the gradient
  // with them; a refusal is rare, and only then is the gradient checked alone
  // to name the cause.
  bool ok = false;
  switch (config.kind) {
    case UpdaterKind::kSgd: ok = updaters::sgd_step(config, value, grad, width, StepMode::kCommitChecked); break;
    case UpdaterKind::kAdaGrad:
      ok = updaters::adagrad_step(config, value, state, grad, width, StepMode::kCommitChecked);
      break;
    case UpdaterKind::kFtrl: ok = updaters::ftrl_step(config, value, state, grad, width, StepMode::kCommitChecked); break;
    case UpdaterKind::kAdam: ok = updaters::adam_step(config, value, state, grad, width, StepMode::kCommitChecked); break;
  }
  if (ok) return UpdateStatus::kApplied;
  return all_finite(grad, width) ? UpdateStatus::kNonFiniteResult : UpdateStatus::kNonFiniteGradient;
}

UpdateStatus apply_update(const UpdaterConfig& config, float* value, float* state, const float* grad,
                          size_t width) {
  if (!all_finite(grad, width)) return UpdateStatus::kNonFiniteGradient;
  // Check pass, then commit pass (see updaters/updater_steps.h).
  for (const updaters::StepMode mode : {updaters::StepMode::kCheck, updaters::StepMode::kCommit}) {
    bool ok = false;
    switch (config.kind) {
      case UpdaterKind::kSgd: ok = updaters::sgd_step(config, value, grad, width, mode); break;
      case UpdaterKind::kAdaGrad: ok = updaters::adagrad_step(config, value, state, grad, width, mode); break;
      case UpdaterKind::kFtrl: ok = updaters::ftrl_step(config, value, state, grad, width, mode); break;
      case UpdaterKind::kAdam: ok = updaters::adam_step(config, value, state, grad, width, mode); break;
    }
    if (!ok) return UpdateStatus::kNonFiniteResult;
  }
  return UpdateStatus::kApplied;
}

}  // namespace parafab::ps
