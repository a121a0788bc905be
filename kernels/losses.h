// Private to kernels/: the two losses of a linear model at margin m, label in
// {0, 1} mapped to y in {-1, +1}, with the derivative with respect to m.
//
// Logistic, stable for any margin: with z = y m,
//   loss  = log(1 + exp(-z)) = max(-z, 0) + log1p(exp(-|z|))
//   dloss = -y * sigmoid(-z),  sigmoid(-z) = e / (1 + e) if z >= 0 with e = exp(-z),
//                              1 / (1 + exp(z))            otherwise,
// so exp() never sees a positive argument and nothing overflows.
// Hinge: loss = max(0, 1 - z), subgradient -y when z < 1, else 0.
#pragma once

#include <cmath>

#include "kernels/csr_batch.h"
#include "kernels/host_device.h"

namespace parafab::kernels::detail {

// The value of nonzero k: vals[k], or 1 when the batch has no values array
// (kVals false), resolved at compile time so the inner loops do not branch.
template <bool kVals>
PARAFAB_HD inline float nonzero_value(const float* vals, uint64_t k) {
  if constexpr (kVals) {
    return vals[k];
  } else {
    (void)vals;
    (void)k;
    return 1.0f;
  }
}

struct LossValue {
  float loss;
  float dloss;  // d loss / d margin
};

PARAFAB_HD inline float label_sign(float label) { return label > 0.5f ? 1.0f : -1.0f; }

// log(1 + e) for e in [0, 1]. On the host, glibc's log1pf (before 2.41) is its
// old slow implementation (~10% of the host gradient's profile at 40 nonzeros
// a row) while its double log() is the fast one (measured: the gradient 4-6%
// faster on one thread). 1 + e is exact in double for every float e >= 2^-29,
// and below that log1p(e) rounds to e in float.
PARAFAB_HD inline float log1p_unit(float e) {
#if defined(__CUDA_ARCH__)
  return log1pf(e);
#else
  const double x = static_cast<double>(e);
  return x < 0x1p-29 ? e : static_cast<float>(log(1.0 + x));
#endif
}

template <Loss L>
PARAFAB_HD inline LossValue eval_loss(float y, float m) {
  const float z = y * m;
  if constexpr (L == Loss::kLogistic) {
    const float e = expf(-fabsf(z));
    const float s = z >= 0.0f ? e / (1.0f + e) : 1.0f / (1.0f + e);  // sigmoid(-z)
    return {fmaxf(-z, 0.0f) + log1p_unit(e), -y * s};
  } else {
    return z < 1.0f ? LossValue{1.0f - z, -y} : LossValue{0.0f, 0.0f};
  }
}

// 1 / (1 + exp(-m)) without overflow for any m.
PARAFAB_HD inline float stable_sigmoid(float m) {
  const float e = expf(-fabsf(m));
  return m >= 0.0f ? 1.0f / (1.0f + e) : e / (1.0f + e);
}

}  // namespace parafab::kernels::detail
