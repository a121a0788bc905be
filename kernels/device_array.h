// An owning array in the memory of the active backend (host memory on the
// OpenMP backend, device memory under PARAFAB_CUDA), with copies to and from
// host vectors. Tests and the worker use it to hand data to the kernels.
//
//   kernels::DeviceArray<float> w(host_weights);   // upload
//   std::vector<float> back = w.to_host();          // download
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "kernels/memory.h"

namespace parafab::kernels {

template <typename T>
class DeviceArray {
 public:
  DeviceArray() = default;
  explicit DeviceArray(size_t n) : n_(n), p_(static_cast<T*>(device_alloc(n * sizeof(T)))) {}
  explicit DeviceArray(std::span<const T> host) : DeviceArray(host.size()) {
    copy_to_device(p_, host.data(), host.size() * sizeof(T));
  }
  explicit DeviceArray(const std::vector<T>& host) : DeviceArray(std::span<const T>(host)) {}
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  DeviceArray(DeviceArray&& o) noexcept : n_(o.n_), p_(o.p_) { o.n_ = 0; o.p_ = nullptr; }
  DeviceArray& operator=(DeviceArray&& o) noexcept {
    if (this != &o) { device_free(p_); n_ = o.n_; p_ = o.p_; o.n_ = 0; o.p_ = nullptr; }
    return *this;
  }
  ~DeviceArray() { device_free(p_); }

  T* data() { return p_; }
  const T* data() const { return p_; }
  size_t size() const { return n_; }

  void upload(std::span<const T> host) {
    if (host.size() != n_) *this = DeviceArray(host.size());
    copy_to_device(p_, host.data(), n_ * sizeof(T));
  }
  std::vector<T> to_host() const {
    std::vector<T> out(n_);
    copy_to_host(out.data(), p_, n_ * sizeof(T));
    return out;
  }

 private:
  size_t n_ = 0;
  T* p_ = nullptr;
};

}  // namespace parafab::kernels
