// Shared by the kernels/ tests: random CSR batches with the awkward cases
// (empty rows, duplicate slots, no values, a bias slot), their upload to
// backend memory, and float64 host references.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "kernels/csr_batch.h"
#include "kernels/device_array.h"
#include "kernels/memory.h"

namespace parafab::kernels::testing {

// Unit roundoff of float32.
inline constexpr double kFloatU = 0x1.0p-24;

struct HostBatch {
  std::vector<uint64_t> row_ptr{0};
  std::vector<uint32_t> cols;
  std::vector<float> vals;  // empty when the batch has no values (all 1)
  std::vector<float> labels;
  int64_t bias_slot = -1;
  int64_t n_rows() const { return static_cast<int64_t>(labels.size()); }
  float value(uint64_t k) const { return vals.empty() ? 1.0f : vals[k]; }
};

struct BatchSpec {
  int64_t rows = 100;
  int64_t slots = 64;
  int max_nnz = 12;         // row lengths uniform in [0, max_nnz]
  double empty_rows = 0.1;  // extra probability of an empty row
  bool with_vals = true;
  bool with_bias = false;  // bias at the last slot, which rows then never name
  uint64_t seed = 1;
};

// Slots are drawn with replacement, so rows over few slots repeat slots.
// Values are distinct-looking reals in [-1, 1]; labels 0/1 at random.
inline HostBatch random_batch(const BatchSpec& s) {
  std::mt19937_64 rng(s.seed);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  HostBatch b;
  const int64_t named_slots = s.with_bias ? s.slots - 1 : s.slots;
  b.bias_slot = s.with_bias ? s.slots - 1 : -1;
  for (int64_t i = 0; i < s.rows; ++i) {
    int len = static_cast<int>(rng() % static_cast<uint64_t>(s.max_nnz + 1));
    if (u(rng) < s.empty_rows) len = 0;
    for (int k = 0; k < len && named_slots > 0; ++k) {
      b.cols.push_back(static_cast<uint32_t>(rng() % static_cast<uint64_t>(named_slots)));
      if (s.with_vals) b.vals.push_back(static_cast<float>(2.0 * u(rng) - 1.0));
    }
    b.row_ptr.push_back(b.cols.size());
    b.labels.push_back(u(rng) < 0.5 ? 1.0f : 0.0f);
  }
  return b;
}

inline std::vector<float> random_weights(int64_t n, double scale, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(-scale, scale);
  std::vector<float> w(static_cast<size_t>(n));
  for (auto& x : w) x = static_cast<float>(u(rng));
  return w;
}

// The batch in backend memory; batch() views it as the kernels take it.
class DeviceBatch {
 public:
  explicit DeviceBatch(const HostBatch& h)
      : row_ptr_(h.row_ptr),
        cols_(h.cols),
        vals_(h.vals),
        labels_(h.labels),
        n_rows_(h.n_rows()),
        bias_slot_(h.bias_slot),
        has_vals_(!h.vals.empty()) {}
  CsrBatch batch() const {
    return CsrBatch{row_ptr_.data(), cols_.data(), has_vals_ ? vals_.data() : nullptr,
                    labels_.data(),  n_rows_,      bias_slot_};
  }

 private:
  DeviceArray<uint64_t> row_ptr_;
  DeviceArray<uint32_t> cols_;
  DeviceArray<float> vals_;
  DeviceArray<float> labels_;
  int64_t n_rows_;
  int64_t bias_slot_;
  bool has_vals_;
};

// m_i in double, and a bound on the error of the kernel's float32 margin:
// recursive summation of len + 1 products, each rounded once (Higham, eq. 4.4
// with the product error folded in): (len + 2) u sum |x w|.
inline double margin(const HostBatch& b, const std::vector<float>& w, int64_t i,
                     double* error_bound = nullptr) {
  double m = 0.0;
  double mag = 0.0;
  if (b.bias_slot >= 0) {
    m += w[static_cast<size_t>(b.bias_slot)];
    mag += std::fabs(w[static_cast<size_t>(b.bias_slot)]);
  }
  const uint64_t begin = b.row_ptr[static_cast<size_t>(i)];
  const uint64_t end = b.row_ptr[static_cast<size_t>(i) + 1];
  for (uint64_t k = begin; k < end; ++k) {
    const double t = static_cast<double>(b.value(k)) * static_cast<double>(w[b.cols[k]]);
    m += t;
    mag += std::fabs(t);
  }
  if (error_bound != nullptr) *error_bound = static_cast<double>(end - begin + 2) * kFloatU * mag;
  return m;
}

inline double label_sign(float label) { return label > 0.5f ? 1.0 : -1.0; }

// Loss and derivative in double, the definitions of kernels/csr_batch.h.
inline void loss_and_derivative(Loss loss, double y, double m, double* l, double* d) {
  const double z = y * m;
  if (loss == Loss::kLogistic) {
    *l = std::max(-z, 0.0) + std::log1p(std::exp(-std::fabs(z)));
    *d = -y / (1.0 + std::exp(z));
  } else {
    *l = std::max(0.0, 1.0 - z);
    *d = z < 1.0 ? -y : 0.0;
  }
}

}  // namespace parafab::kernels::testing
