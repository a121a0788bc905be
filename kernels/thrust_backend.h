// Private to kernels/: the Thrust execution policy of the active backend and a
// scratch array in backend memory.
//
// thrust::device is the OpenMP system when the target is built with
// THRUST_DEVICE_SYSTEM=OMP (parafab_thrust on hosts) and CUDA under nvcc with
// PARAFAB_CUDA, so every kernel names `policy()` and nothing else. Raw
// pointers are passed straight to the algorithms; the policy, not the pointer
// type, selects the system.
#pragma once

#include <thrust/execution_policy.h>

#include <cstddef>

#include "kernels/memory.h"

namespace parafab::kernels::detail {

inline auto policy() { return thrust::device; }

// Owning, uninitialized backend memory for temporaries of one call
// (device_alloc: 64-byte aligned host heap, or cudaMalloc).
template <typename T>
class Scratch {
 public:
  explicit Scratch(size_t n) : p_(static_cast<T*>(device_alloc(n * sizeof(T)))) {}
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  ~Scratch() { device_free(p_); }
  T* get() const { return p_; }

 private:
  T* p_;
};

}  // namespace parafab::kernels::detail
