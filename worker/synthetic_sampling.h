// Private to worker/: the random streams and the Zipf sampler the synthetic
// data generators (synthetic_data.cpp, synthetic_criteo.cpp) share.
//
// A counter-based stream: the n-th number of stream (seed, id) is
// mix64(base + n * golden), so every block can be generated independently and
// the output does not depend on how blocks are spread over threads.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "ps/key_hash.h"

namespace parafab::worker::detail {

class Stream {
 public:
  Stream(uint64_t seed, uint64_t id) : state_(ps::mix64(seed * 0x9e3779b97f4a7c15ULL + ps::mix64(id))) {}
  uint64_t next() { return ps::mix64(state_ += 0x9e3779b97f4a7c15ULL); }
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }  // [0, 1)
  double normal() {  // Box-Muller; one of the pair is dropped for simplicity.
    double u1 = uniform(), u2 = uniform();
    if (u1 < 1e-300) u1 = 1e-300;
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
  }

 private:
  uint64_t state_;
};

// Inverse-CDF sampler of Zipf ranks over [0, n) with exponent s.
class ZipfSampler {
 public:
  ZipfSampler(uint64_t n, double s) : cdf_(n) {
    double acc = 0;
    for (uint64_t k = 0; k < n; ++k) cdf_[k] = (acc += std::pow(static_cast<double>(k + 1), -s));
    for (double& c : cdf_) c /= acc;
  }
  // The rank for a uniform u in [0, 1).
  uint64_t sample(double u) const {
    auto it = std::upper_bound(cdf_.begin(), cdf_.end(), u);
    return std::min<uint64_t>(static_cast<uint64_t>(it - cdf_.begin()), cdf_.size() - 1);
  }
  // The probability sample() returns k (the last rank also takes u >= cdf.back()).
  double pmf(uint64_t k) const {
    const double hi = k + 1 == cdf_.size() ? 1.0 : cdf_[k];
    return hi - (k ? cdf_[k - 1] : 0.0);
  }

 private:
  std::vector<double> cdf_;
};

}  // namespace parafab::worker::detail
