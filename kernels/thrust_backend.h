// Private to kernels/: the Thrust execution policy of the active backend and a
// scratch array in backend memory.
//
// thrust::device is the OpenMP system when the target is built with
// THRUST_DEVICE_SYSTEM=OMP (parafab_thrust on hosts); under nvcc with
// PARAFAB_CUDA the policy is CUDA's with Thrust's temporary storage taken
// from device_alloc (the device's stream-ordered pool) instead of a
// cudaMalloc and a synchronising cudaFree per algorithm call. Every kernel
// names `policy()` and nothing else. Raw pointers are passed straight to the
// algorithms; the policy, not the pointer type, selects the system.
#pragma once

#include <thrust/execution_policy.h>

#include <algorithm>
#include <cstddef>

#include "kernels/memory.h"
#include "parafab/config.h"

namespace parafab::kernels::detail {

#if PARAFAB_CUDA
// Thrust's temporary allocations (the interface of thrust::cuda::par(alloc)).
struct ScratchAllocator {
  using value_type = char;
  char* allocate(std::ptrdiff_t n) {
    return static_cast<char*>(device_alloc(static_cast<size_t>(std::max<std::ptrdiff_t>(n, 1))));
  }
  void deallocate(char* p, size_t /*n*/) noexcept { device_free(p); }
};

inline auto policy() {
  static ScratchAllocator alloc;  // stateless; par() keeps a reference to it
  return thrust::cuda::par(alloc);
}
#else
inline auto policy() { return thrust::device; }
#endif

// Owning, uninitialized backend memory for temporaries of one call
// (device_alloc: 64-byte aligned host heap, or the device's pool).
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
