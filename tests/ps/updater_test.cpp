// Updaters against float64 references written here from the papers' formulas
// (not from ps/updaters/), plus closed-form first steps, FTRL's exact zeros,
// validation messages, and refusal of non-finite gradients.
#include "ps/updater.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

namespace parafab::ps {
namespace {

using ::testing::HasSubstr;

// ---- float64 references ----------------------------------------------------

// Value and state of one key, in double, never rounded to float.
struct Ref {
  std::vector<double> w, a, b;  // a, b: AdaGrad G; FTRL z, n; Adam m, v
  double t = 0;
};

double sign(double x) { return x > 0 ? 1.0 : (x < 0 ? -1.0 : 0.0); }
double shrink(double u, double t) { return sign(u) * std::max(std::fabs(u) - t, 0.0); }

void ref_sgd(const UpdaterConfig& c, Ref& r, const std::vector<double>& grad) {
  for (size_t i = 0; i < r.w.size(); ++i) {
    double g = grad[i] + double{c.l2} * r.w[i];
    r.w[i] = shrink(r.w[i] - double{c.learning_rate} * g, double{c.learning_rate} * c.l1);
  }
}

// Duchi, Hazan, Singer 2011: diagonal AdaGrad, composite (proximal) L1.
void ref_adagrad(const UpdaterConfig& c, Ref& r, const std::vector<double>& grad) {
  for (size_t i = 0; i < r.w.size(); ++i) {
    double g = grad[i] + double{c.l2} * r.w[i];
    r.a[i] += g * g;
    double eta = double{c.learning_rate} / (double{c.adagrad_epsilon} + std::sqrt(r.a[i]));
    r.w[i] = shrink(r.w[i] - eta * g, eta * c.l1);
  }
}

// McMahan et al. 2013, Algorithm 1, literally.
void ref_ftrl(const UpdaterConfig& c, Ref& r, const std::vector<double>& grad) {
  const double alpha = c.ftrl_alpha, beta = c.ftrl_beta, l1 = c.ftrl_l1, l2 = c.ftrl_l2;
  for (size_t i = 0; i < r.w.size(); ++i) {
    double& z = r.a[i];
    double& n = r.b[i];
    const double g = grad[i];
    const double sigma = (std::sqrt(n + g * g) - std::sqrt(n)) / alpha;
    z += g - sigma * r.w[i];
    n += g * g;
    r.w[i] = std::fabs(z) <= l1 ? 0.0 : -(z - sign(z) * l1) / ((beta + std::sqrt(n)) / alpha + l2);
  }
}

// Kingma & Ba 2015, Algorithm 1, t counted per key.
void ref_adam(const UpdaterConfig& c, Ref& r, const std::vector<double>& grad) {
  const double b1 = c.adam_beta1, b2 = c.adam_beta2;
  r.t += 1;
  for (size_t i = 0; i < r.w.size(); ++i) {
    double g = grad[i] + double{c.l2} * r.w[i];
    r.a[i] = b1 * r.a[i] + (1 - b1) * g;
    r.b[i] = b2 * r.b[i] + (1 - b2) * g * g;
    double m_hat = r.a[i] / (1 - std::pow(b1, r.t));
    double v_hat = r.b[i] / (1 - std::pow(b2, r.t));
    r.w[i] -= double{c.learning_rate} * m_hat / (std::sqrt(v_hat) + double{c.adam_epsilon});
  }
}

void ref_step(const UpdaterConfig& c, Ref& r, const std::vector<double>& grad) {
  switch (c.kind) {
    case UpdaterKind::kSgd: ref_sgd(c, r, grad); break;
    case UpdaterKind::kAdaGrad: ref_adagrad(c, r, grad); break;
    case UpdaterKind::kFtrl: ref_ftrl(c, r, grad); break;
    case UpdaterKind::kAdam: ref_adam(c, r, grad); break;
  }
}

// Configs with every regularizer switched on, so the reference checks them too.
UpdaterConfig config_for(UpdaterKind kind) {
  UpdaterConfig c;
  c.kind = kind;
  switch (kind) {
    case UpdaterKind::kSgd: c.learning_rate = 0.05f; c.l1 = 0.002f; c.l2 = 0.01f; break;
    case UpdaterKind::kAdaGrad: c.learning_rate = 0.1f; c.l1 = 0.005f; c.l2 = 0.01f; break;
    case UpdaterKind::kFtrl: c.ftrl_alpha = 0.2f; c.ftrl_beta = 1.0f; c.ftrl_l1 = 0.5f; c.ftrl_l2 = 0.3f; break;
    case UpdaterKind::kAdam: c.learning_rate = 0.01f; c.l2 = 0.01f; break;
  }
  c.validate();
  return c;
}

bool close(double got, double want, double rtol, double atol) {
  return std::fabs(got - want) <= atol + rtol * std::fabs(want);
}

// ---- against the references --------------------------------------------------

class UpdaterReferenceTest : public ::testing::TestWithParam<std::tuple<UpdaterKind, size_t>> {};

TEST_P(UpdaterReferenceTest, MatchesFloat64ReferenceOverManySteps) {
  const auto [kind, width] = GetParam();
  const UpdaterConfig c = config_for(kind);
  std::mt19937_64 rng(1234 + width * 10 + static_cast<int>(kind));
  std::normal_distribution<double> normal(0.0, 1.0);

  // Distinct initial values (FTRL's state is derived from them), and a
  // per-coordinate gradient scale and bias so coordinates differ in size.
  std::vector<float> value(width), state(state_floats_per_key(kind, width), -7.0f);
  std::vector<double> scale(width), bias(width);
  for (size_t i = 0; i < width; ++i) {
    value[i] = static_cast<float>(0.01 * (static_cast<double>(i) + 1) * (i % 2 ? -1 : 1));
    scale[i] = std::pow(10.0, -1.0 + 2.0 * static_cast<double>(i % 5) / 4);  // 0.1 .. 10
    bias[i] = 0.3 * normal(rng);
  }
  initialize_state(c, value.data(), state.data(), width);

  Ref r;
  r.w.assign(value.begin(), value.end());
  r.a.assign(width, 0.0);
  r.b.assign(width, 0.0);
  if (kind == UpdaterKind::kAdaGrad) r.a.assign(width, double{c.adagrad_initial_accumulator});
  if (kind == UpdaterKind::kFtrl) {
    // z with w(z, n = 0) = the initial value, inverted by hand from Algorithm 1.
    for (size_t i = 0; i < width; ++i) {
      double w = r.w[i];
      r.a[i] = -(w * (double{c.ftrl_beta} / c.ftrl_alpha + c.ftrl_l2) + sign(w) * c.ftrl_l1);
    }
  }

  const int steps = 400;
  std::vector<float> grad(width);
  std::vector<double> grad_d(width);
  for (int s = 0; s < steps; ++s) {
    for (size_t i = 0; i < width; ++i) {
      // Some coordinates are absent from some pushes (gradient 0), as with
      // sparse features.
      const bool present = (s + static_cast<int>(i)) % 4 != 0;
      grad[i] = present ? static_cast<float>(scale[i] * (bias[i] + normal(rng))) : 0.0f;
      grad_d[i] = grad[i];
    }
    ASSERT_EQ(apply_update(c, value.data(), state.data(), grad.data(), width), UpdateStatus::kApplied)
        << "step " << s;
    ref_step(c, r, grad_d);
  }

  // Float storage rounds every step; the reference never does. 400 steps of
  // 2^-24 relative error each, with room for the conditioning of each rule.
  const double rtol = 2e-4, atol = 2e-5;
  const size_t per = state_floats_per_value(kind);
  for (size_t i = 0; i < width; ++i) {
    EXPECT_PRED4(close, value[i], r.w[i], rtol, atol) << "value[" << i << "]";
    if (per >= 1) {
      EXPECT_PRED4(close, state[i], r.a[i], rtol, atol) << "state slot 0 [" << i << "]";
    }
    if (per >= 2) {
      EXPECT_PRED4(close, state[width + i], r.b[i], rtol, atol) << "state slot 1 [" << i << "]";
    }
  }
  if (kind == UpdaterKind::kAdam) {
    EXPECT_EQ(state[2 * width], static_cast<float>(steps));
  }
}

INSTANTIATE_TEST_SUITE_P(
    KindsAndWidths, UpdaterReferenceTest,
    ::testing::Combine(::testing::Values(UpdaterKind::kSgd, UpdaterKind::kAdaGrad, UpdaterKind::kFtrl,
                                         UpdaterKind::kAdam),
                       ::testing::Values(size_t{1}, size_t{3}, size_t{16}, size_t{65})),
    [](const auto& info) {
      return std::string(to_string(std::get<0>(info.param))) + "_width" + std::to_string(std::get<1>(info.param));
    });

// ---- closed forms ----------------------------------------------------------

TEST(Ftrl, FirstStepMatchesClosedForm) {
  UpdaterConfig c;
  c.kind = UpdaterKind::kFtrl;
  c.ftrl_alpha = 0.5f;
  c.ftrl_beta = 1.0f;
  c.ftrl_l1 = 0.25f;
  c.ftrl_l2 = 0.5f;
  c.validate();
  // From z = n = w = 0: sigma = |g| / alpha, z = g, n = g^2, and
  // w = -(g - sign(g) l1) / ((beta + |g|) / alpha + l2) when |g| > l1.
  //   g = 2:    w = -(2 - 0.25) / ((1 + 2) / 0.5 + 0.5) = -1.75 / 6.5
  //   g = -1:   w = -(-1 + 0.25) / ((1 + 1) / 0.5 + 0.5) = 0.75 / 4.5
  //   g = 0.25: |z| <= l1, w = 0 exactly
  //   g = -0.1: w = 0 exactly
  const std::vector<float> grad = {2.0f, -1.0f, 0.25f, -0.1f};
  const std::vector<double> want = {-1.75 / 6.5, 0.75 / 4.5, 0.0, 0.0};
  std::vector<float> value(4, 0.0f), state(state_floats_per_key(c.kind, 4));
  initialize_state(c, value.data(), state.data(), 4);
  ASSERT_EQ(apply_update(c, value.data(), state.data(), grad.data(), 4), UpdateStatus::kApplied);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_FLOAT_EQ(value[i], static_cast<float>(want[i])) << i;
    EXPECT_EQ(state[i], grad[i]) << "z[" << i << "]";
    EXPECT_EQ(state[4 + i], grad[i] * grad[i]) << "n[" << i << "]";
  }
  EXPECT_EQ(value[2], 0.0f);
  EXPECT_EQ(value[3], 0.0f);
}

TEST(Ftrl, L1KeepsRarelyPushedCoordinatesAtExactZero) {
  UpdaterConfig c;
  c.kind = UpdaterKind::kFtrl;
  c.ftrl_l1 = 1.0f;
  c.validate();
  const size_t width = 16;
  std::vector<float> value(width, 0.0f), state(state_floats_per_key(c.kind, width));
  initialize_state(c, value.data(), state.data(), width);
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> jitter(0.8f, 1.2f);
  std::vector<float> grad(width);
  for (int s = 0; s < 300; ++s) {
    for (size_t i = 0; i < width; ++i) {
      const float sgn = i % 2 ? -1.0f : 1.0f;
      if (i < 8) {
        grad[i] = sgn * jitter(rng);  // frequent, strong, consistent: a real signal
      } else {
        // Rare and small, but consistent: pushed every 10th step with 0.02,
        // so |z| reaches 30 * 0.02 = 0.6 < l1 and never crosses the threshold.
        grad[i] = (s % 10 == static_cast<int>(i % 10)) ? sgn * 0.02f : 0.0f;
      }
    }
    ASSERT_EQ(apply_update(c, value.data(), state.data(), grad.data(), width), UpdateStatus::kApplied);
    for (size_t i = 8; i < width; ++i) ASSERT_EQ(value[i], 0.0f) << "coordinate " << i << " at step " << s;
  }
  for (size_t i = 0; i < 8; ++i) {
    EXPECT_NE(value[i], 0.0f) << "coordinate " << i;
    // A positive gradient pushes the weight negative.
    EXPECT_EQ(std::signbit(value[i]), i % 2 == 0) << "coordinate " << i;
  }
  for (size_t i = 8; i < width; ++i) EXPECT_GT(std::fabs(state[i]), 0.0f) << "z[" << i << "] was pushed";
}

TEST(Ftrl, InitialStateReproducesTheInitialValue) {
  UpdaterConfig c;
  c.kind = UpdaterKind::kFtrl;
  c.validate();
  const std::vector<float> init = {0.0f, 0.5f, -0.25f, 1e-3f, -3.0f};
  std::vector<float> value = init, state(state_floats_per_key(c.kind, init.size()));
  initialize_state(c, value.data(), state.data(), init.size());
  // A zero gradient leaves z and n alone and rewrites w from the closed form.
  const std::vector<float> zero(init.size(), 0.0f);
  ASSERT_EQ(apply_update(c, value.data(), state.data(), zero.data(), init.size()), UpdateStatus::kApplied);
  // Up to float rounding of z, which also carries the l1 offset: |dw| is
  // about ulp(|w| * (beta / alpha + l2) + l1) / (beta / alpha + l2).
  for (size_t i = 0; i < init.size(); ++i) EXPECT_NEAR(value[i], init[i], 1e-8 + 1e-6 * std::fabs(init[i])) << i;
  EXPECT_EQ(value[0], 0.0f);
}

TEST(Adam, FirstStepIsLearningRateTimesSignOfGradient) {
  UpdaterConfig c;
  c.kind = UpdaterKind::kAdam;
  c.learning_rate = 0.01f;
  c.validate();
  // With bias correction, m_hat = g and v_hat = g^2 after one step, so the
  // step is lr * g / (|g| + eps): lr * sign(g) whatever the gradient's size.
  const std::vector<float> grad = {1e-3f, -1e-3f, 0.5f, -2.0f, 40.0f, -1e3f, 7.0f, 0.0f};
  const std::vector<float> init = {0.1f, 0.2f, -0.3f, 0.4f, -0.5f, 0.6f, -0.7f, 0.8f};
  std::vector<float> value = init, state(state_floats_per_key(c.kind, grad.size()));
  initialize_state(c, value.data(), state.data(), grad.size());
  ASSERT_EQ(apply_update(c, value.data(), state.data(), grad.data(), grad.size()), UpdateStatus::kApplied);
  for (size_t i = 0; i < grad.size(); ++i) {
    const double sgn = grad[i] > 0 ? 1.0 : (grad[i] < 0 ? -1.0 : 0.0);
    EXPECT_NEAR(value[i], init[i] - 0.01 * sgn, 1e-7) << i;
  }
  EXPECT_EQ(state[2 * grad.size()], 1.0f);
}

TEST(Adam, StepCountSaturatesAtTwoToThe24) {
  UpdaterConfig c;
  c.kind = UpdaterKind::kAdam;
  std::vector<float> value = {1.0f}, state(state_floats_per_key(c.kind, 1), 0.0f);
  state[2] = 16777216.0f;
  const float g = 0.5f;
  ASSERT_EQ(apply_update(c, value.data(), state.data(), &g, 1), UpdateStatus::kApplied);
  EXPECT_EQ(state[2], 16777216.0f);
}

TEST(Sgd, FirstStepIsProximal) {
  UpdaterConfig c;
  c.learning_rate = 0.5f;
  c.l1 = 0.1f;
  c.validate();
  // u = w - lr * g; w = sign(u) * max(|u| - lr * l1, 0), lr * l1 = 0.05.
  std::vector<float> value = {1.0f, 0.02f, -1.0f};
  const std::vector<float> grad = {1.0f, 0.0f, -0.5f};  // u = 0.5, 0.02, -0.75
  ASSERT_EQ(apply_update(c, value.data(), nullptr, grad.data(), 3), UpdateStatus::kApplied);
  EXPECT_FLOAT_EQ(value[0], 0.45f);
  EXPECT_EQ(value[1], 0.0f);
  EXPECT_FLOAT_EQ(value[2], -0.7f);
}


// Without L1 and L2 the step takes a shorter path; it must give the bits of
// the full formula, u = w - lr * (g + l2 * w) in double, shrunk by lr * l1,
// rounded once to float: zeros of either sign, subnormals, huge and tiny
// magnitudes, many learning rates. An infinite or NaN value (only a restore
// puts one there) is not in the paper's formula; the full step turns it into
// +0 (g' = g + l2 * w is NaN, and the threshold maps NaN to 0), with or
// without L2, and so must the short path. Both entry points (in place and to a copy).
TEST(Sgd, WithoutRegularizationGivesTheFullFormulasBits) {
  std::mt19937 rng(5);
  std::uniform_int_distribution<int> exponent(-140, 30);
  std::uniform_real_distribution<float> mantissa(-2.0f, 2.0f);
  auto number = [&] { return std::ldexp(mantissa(rng), exponent(rng)); };
  const std::vector<float> special_grad = {0.0f, -0.0f, 1e-45f, -1e-45f, 1.17549435e-38f, 1.0f, -1.0f};
  const std::vector<float>& special_value = special_grad;
  for (int round = 0; round < 200; ++round) {
    UpdaterConfig c;
    c.learning_rate = round == 0 ? 1.0f : std::ldexp(std::fabs(mantissa(rng)) + 0.01f, exponent(rng) / 8);
    c.validate();
    constexpr size_t kWidth = 97;  // not a multiple of any vector width
    std::vector<float> value(kWidth), grad(kWidth);
    // Every pair of special numbers, then random ones.
    const size_t n = special_grad.size();
    for (size_t i = 0; i < kWidth; ++i) {
      const bool pair = i < special_value.size() * n;
      value[i] = pair ? special_value[i / n] : number();
      grad[i] = pair ? special_grad[i % n] : number();
    }
    std::vector<float> want(kWidth);
    for (size_t i = 0; i < kWidth; ++i) {
      const double w = value[i];
      const double g = static_cast<double>(grad[i]) + double{c.l2} * w;
      want[i] = static_cast<float>(shrink(w - double{c.learning_rate} * g, double{c.learning_rate} * c.l1));
    }
    std::vector<float> copy = value, state;
    ASSERT_EQ(apply_update_to_copy(c, copy.data(), state.data(), grad.data(), kWidth), UpdateStatus::kApplied);
    ASSERT_EQ(apply_update(c, value.data(), nullptr, grad.data(), kWidth), UpdateStatus::kApplied);
    for (size_t i = 0; i < kWidth; ++i) {
      ASSERT_EQ(std::bit_cast<uint32_t>(value[i]), std::bit_cast<uint32_t>(want[i]))
          << "round " << round << " coordinate " << i << ": got " << value[i] << " want " << want[i];
      ASSERT_EQ(std::bit_cast<uint32_t>(copy[i]), std::bit_cast<uint32_t>(want[i])) << "round " << round << " coordinate " << i;
    }
  }
  const std::vector<float> non_finite = {std::numeric_limits<float>::infinity(),
                                         -std::numeric_limits<float>::infinity(),
                                         std::numeric_limits<float>::quiet_NaN()};
  const std::vector<float> grad(non_finite.size(), 0.5f);
  UpdaterConfig plain, with_l2;
  with_l2.l2 = 1e-20f;
  for (const UpdaterConfig* c : {&plain, &with_l2}) {
    std::vector<float> value = non_finite;
    ASSERT_EQ(apply_update(*c, value.data(), nullptr, grad.data(), value.size()), UpdateStatus::kApplied);
    for (float v : value) EXPECT_EQ(std::bit_cast<uint32_t>(v), 0u) << "l2 " << c->l2;
  }
}
// ---- configuration ------------------------------------------------------------

TEST(UpdaterConfig, DefaultsAreValidForEveryKind) {
  for (auto k : {UpdaterKind::kSgd, UpdaterKind::kAdaGrad, UpdaterKind::kFtrl, UpdaterKind::kAdam}) {
    UpdaterConfig c;
    c.kind = k;
    EXPECT_NO_THROW(c.validate()) << to_string(k);
    EXPECT_THAT(to_string(c), HasSubstr(std::string("updater=") + to_string(k)));
  }
}

struct BadField {
  const char* field;
  UpdaterKind kind;
  float UpdaterConfig::*member;
  float value;
  const char* shown;  // how the value appears in the message
};

TEST(UpdaterConfig, ValidateNamesTheBadFieldAndValue) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<BadField> cases = {
      {"learning_rate", UpdaterKind::kSgd, &UpdaterConfig::learning_rate, 0.0f, "0"},
      {"learning_rate", UpdaterKind::kAdam, &UpdaterConfig::learning_rate, -0.5f, "-0.5"},
      {"learning_rate", UpdaterKind::kSgd, &UpdaterConfig::learning_rate, nan, "nan"},
      {"l1", UpdaterKind::kSgd, &UpdaterConfig::l1, -1.0f, "-1"},
      {"l2", UpdaterKind::kAdaGrad, &UpdaterConfig::l2, inf, "inf"},
      {"adagrad_epsilon", UpdaterKind::kAdaGrad, &UpdaterConfig::adagrad_epsilon, -1e-3f, "-0.001"},
      {"adagrad_initial_accumulator", UpdaterKind::kAdaGrad, &UpdaterConfig::adagrad_initial_accumulator, -2.0f,
       "-2"},
      {"ftrl_alpha", UpdaterKind::kFtrl, &UpdaterConfig::ftrl_alpha, -1.0f, "-1"},
      {"ftrl_beta", UpdaterKind::kFtrl, &UpdaterConfig::ftrl_beta, -3.0f, "-3"},
      {"ftrl_l1", UpdaterKind::kFtrl, &UpdaterConfig::ftrl_l1, -0.25f, "-0.25"},
      {"ftrl_l2", UpdaterKind::kFtrl, &UpdaterConfig::ftrl_l2, nan, "nan"},
      {"adam_beta1", UpdaterKind::kAdam, &UpdaterConfig::adam_beta1, 1.0f, "1"},
      {"adam_beta2", UpdaterKind::kAdam, &UpdaterConfig::adam_beta2, -0.1f, "-0.1"},
      {"adam_epsilon", UpdaterKind::kAdam, &UpdaterConfig::adam_epsilon, 0.0f, "0"},
      // Fields another kind uses are still checked.
      {"adam_beta2", UpdaterKind::kSgd, &UpdaterConfig::adam_beta2, 2.0f, "2"},
      // Kind-specific refusals.
      {"l1", UpdaterKind::kFtrl, &UpdaterConfig::l1, 0.5f, "0.5"},
      {"l2", UpdaterKind::kFtrl, &UpdaterConfig::l2, 0.5f, "0.5"},
      {"l1", UpdaterKind::kAdam, &UpdaterConfig::l1, 0.5f, "0.5"},
  };
  for (const auto& bad : cases) {
    UpdaterConfig c;
    c.kind = bad.kind;
    c.*bad.member = bad.value;
    try {
      c.validate();
      ADD_FAILURE() << bad.field << " = " << bad.value << " was accepted for " << to_string(bad.kind);
    } catch (const std::invalid_argument& e) {
      EXPECT_THAT(e.what(), HasSubstr(std::string("UpdaterConfig: ") + bad.field + " = " + bad.shown))
          << "for " << to_string(bad.kind);
    }
  }
}

TEST(UpdaterConfig, ValidateRefusesDegenerateCombinations) {
  UpdaterConfig a;
  a.kind = UpdaterKind::kAdaGrad;
  a.adagrad_epsilon = 0.0f;
  a.adagrad_initial_accumulator = 0.0f;
  EXPECT_THROW(a.validate(), std::invalid_argument);
  a.adagrad_initial_accumulator = 0.1f;
  EXPECT_NO_THROW(a.validate());

  UpdaterConfig f;
  f.kind = UpdaterKind::kFtrl;
  f.ftrl_beta = 0.0f;
  f.ftrl_l2 = 0.0f;
  EXPECT_THROW(f.validate(), std::invalid_argument);
  f.ftrl_l2 = 1.0f;
  EXPECT_NO_THROW(f.validate());
}

TEST(UpdaterConfig, KindNamesRoundTrip) {
  for (auto k : {UpdaterKind::kSgd, UpdaterKind::kAdaGrad, UpdaterKind::kFtrl, UpdaterKind::kAdam})
    EXPECT_EQ(parse_updater_kind(to_string(k)), k);
  try {
    (void)parse_updater_kind("rmsprop");
    ADD_FAILURE() << "rmsprop was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_THAT(e.what(), HasSubstr("rmsprop"));
  }
}

TEST(UpdaterConfig, StateSizes) {
  EXPECT_EQ(state_floats_per_value(UpdaterKind::kSgd), 0u);
  EXPECT_EQ(state_floats_per_value(UpdaterKind::kAdaGrad), 1u);
  EXPECT_EQ(state_floats_per_value(UpdaterKind::kFtrl), 2u);
  EXPECT_EQ(state_floats_per_value(UpdaterKind::kAdam), 2u);
  EXPECT_EQ(state_floats_per_key(UpdaterKind::kSgd, 8), 0u);
  EXPECT_EQ(state_floats_per_key(UpdaterKind::kAdaGrad, 8), 8u);
  EXPECT_EQ(state_floats_per_key(UpdaterKind::kFtrl, 8), 16u);
  EXPECT_EQ(state_floats_per_key(UpdaterKind::kAdam, 8), 17u);
}

// ---- non-finite input -----------------------------------------------------------

TEST(AllFinite, FindsNanAndInfinityAnywhere) {
  std::vector<float> x(37, 1.5f);
  EXPECT_TRUE(all_finite(x.data(), x.size()));
  EXPECT_TRUE(all_finite(nullptr, 0));
  x[0] = std::numeric_limits<float>::max();
  x[1] = std::numeric_limits<float>::denorm_min();
  EXPECT_TRUE(all_finite(x.data(), x.size()));
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                    -std::numeric_limits<float>::infinity()}) {
    for (size_t at : {size_t{0}, size_t{17}, size_t{36}}) {
      auto y = x;
      y[at] = bad;
      EXPECT_FALSE(all_finite(y.data(), y.size())) << bad << " at " << at;
    }
  }
}

class UpdaterRefusalTest : public ::testing::TestWithParam<UpdaterKind> {
 protected:
  static constexpr size_t kWidth = 9;

  // A key that has taken a few steps, so the state is not trivial.
  void SetUp() override {
    c_ = config_for(GetParam());
    value_.resize(kWidth);
    for (size_t i = 0; i < kWidth; ++i) value_[i] = 0.1f * static_cast<float>(i) - 0.35f;
    state_.assign(state_floats_per_key(c_.kind, kWidth), 0.0f);
    initialize_state(c_, value_.data(), state_.data(), kWidth);
    std::vector<float> g(kWidth);
    for (int s = 0; s < 5; ++s) {
      for (size_t i = 0; i < kWidth; ++i) g[i] = static_cast<float>(s + 1) * (i % 3 == 0 ? -0.7f : 0.4f);
      ASSERT_EQ(apply_update(c_, value_.data(), state_.data(), g.data(), kWidth), UpdateStatus::kApplied);
    }
  }

  // Bitwise: a refused update must not touch a single byte.
  void expect_untouched(const std::vector<float>& value, const std::vector<float>& state) {
    EXPECT_EQ(std::memcmp(value.data(), value_.data(), kWidth * sizeof(float)), 0) << "value changed";
    if (!state.empty()) {
      EXPECT_EQ(std::memcmp(state.data(), state_.data(), state.size() * sizeof(float)), 0) << "state changed";
    }
  }

  UpdaterConfig c_;
  std::vector<float> value_, state_;
};

TEST_P(UpdaterRefusalTest, NonFiniteGradientIsRefusedAndChangesNothing) {
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                    -std::numeric_limits<float>::infinity()}) {
    for (size_t at : {size_t{0}, size_t{4}, kWidth - 1}) {
      std::vector<float> grad(kWidth, 0.25f);
      grad[at] = bad;
      auto value = value_;
      auto state = state_;
      EXPECT_EQ(apply_update(c_, value.data(), state.data(), grad.data(), kWidth),
                UpdateStatus::kNonFiniteGradient)
          << bad << " at " << at;
      expect_untouched(value, state);
    }
  }
}

TEST_P(UpdaterRefusalTest, OverflowingResultIsRefusedAndChangesNothing) {
  // A finite gradient whose square (AdaGrad, FTRL, Adam) or step (SGD with a
  // large learning rate) leaves float range, in the last coordinate, after
  // coordinates that would have been written first.
  auto c = c_;
  if (c.kind == UpdaterKind::kSgd) c.learning_rate = 1e10f;
  std::vector<float> grad(kWidth, 0.25f);
  grad[kWidth - 1] = c.kind == UpdaterKind::kSgd ? 1e30f : 3e30f;
  auto value = value_;
  auto state = state_;
  EXPECT_EQ(apply_update(c, value.data(), state.data(), grad.data(), kWidth), UpdateStatus::kNonFiniteResult);
  expect_untouched(value, state);
  // A plain gradient still applies afterwards.
  grad[kWidth - 1] = 0.25f;
  EXPECT_EQ(apply_update(c, value.data(), state.data(), grad.data(), kWidth), UpdateStatus::kApplied);
  EXPECT_TRUE(all_finite(value.data(), kWidth));
  EXPECT_TRUE(all_finite(state.data(), state.size()));
}

// apply_update_to_copy (DenseTable's one-pass update of a scratch row)
// against apply_update on random rows and steps: the same status, and when
// applied the same bits; the refusals of both tests above too.
TEST_P(UpdaterRefusalTest, ToCopyMatchesApplyUpdateBitForBit) {
  std::mt19937 rng(17);
  std::uniform_real_distribution<float> g(-3.0f, 3.0f);
  auto value = value_, state = state_;
  for (int step = 0; step < 50; ++step) {
    std::vector<float> grad(kWidth);
    for (float& x : grad) x = g(rng);
    auto v_copy = value, s_copy = state;
    const UpdateStatus want = apply_update(c_, value.data(), state.data(), grad.data(), kWidth);
    ASSERT_EQ(apply_update_to_copy(c_, v_copy.data(), s_copy.data(), grad.data(), kWidth), want) << "step " << step;
    ASSERT_EQ(want, UpdateStatus::kApplied);
    EXPECT_EQ(std::memcmp(v_copy.data(), value.data(), kWidth * sizeof(float)), 0) << "step " << step;
    if (!state.empty()) {
      EXPECT_EQ(std::memcmp(s_copy.data(), state.data(), state.size() * sizeof(float)), 0) << "step " << step;
    }
  }
  std::vector<float> nan_grad(kWidth, 0.25f);
  nan_grad[3] = std::numeric_limits<float>::quiet_NaN();
  auto v_copy = value, s_copy = state;
  EXPECT_EQ(apply_update_to_copy(c_, v_copy.data(), s_copy.data(), nan_grad.data(), kWidth),
            UpdateStatus::kNonFiniteGradient);
  auto c = c_;
  if (c.kind == UpdaterKind::kSgd) c.learning_rate = 1e10f;
  std::vector<float> huge(kWidth, 0.25f);
  huge[kWidth - 1] = c.kind == UpdaterKind::kSgd ? 1e30f : 3e30f;
  v_copy = value;
  s_copy = state;
  EXPECT_EQ(apply_update_to_copy(c, v_copy.data(), s_copy.data(), huge.data(), kWidth), UpdateStatus::kNonFiniteResult);
}

INSTANTIATE_TEST_SUITE_P(Kinds, UpdaterRefusalTest,
                         ::testing::Values(UpdaterKind::kSgd, UpdaterKind::kAdaGrad, UpdaterKind::kFtrl,
                                           UpdaterKind::kAdam),
                         [](const auto& info) { return std::string(to_string(info.param)); });

TEST(UpdateStatus, Names) {
  EXPECT_STREQ(to_string(UpdateStatus::kApplied), "applied");
  EXPECT_STREQ(to_string(UpdateStatus::kNonFiniteGradient), "non-finite gradient");
  EXPECT_STREQ(to_string(UpdateStatus::kNonFiniteResult), "non-finite result");
}

}  // namespace
}  // namespace parafab::ps
