// Private to kernels/: the Thrust execution policy of the active backend, a
// scratch array in backend memory, and for_each_sum (a sum over rows whose
// task has side effects).
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
#include <thrust/for_each.h>
#include <thrust/functional.h>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/reduce.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "kernels/host_device.h"
#include "kernels/memory.h"
#include "parafab/config.h"

namespace parafab::kernels::detail {

#if PARAFAB_CUDA
// Thrust's temporary allocations (the interface of thrust::cuda::par(alloc)).
struct ThrustTemporaryAllocator {
  using value_type = char;
  char* allocate(std::ptrdiff_t n) {
    return static_cast<char*>(device_alloc(static_cast<size_t>(std::max<std::ptrdiff_t>(n, 1))));
  }
  void deallocate(char* p, size_t /*n*/) noexcept { device_free(p); }
};

inline auto policy() {
  static ThrustTemporaryAllocator alloc;  // stateless; par() keeps a reference to it
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

// out[i] = f(i).
template <typename F>
struct StoreEach {
  F f;
  double* out;
  PARAFAB_HD void operator()(int64_t i) const { out[i] = f(i); }
};

// The sum over i in [0, n) of f(i), for an f with side effects (atomic
// scatters, Hogwild steps) that must run exactly once per index:
// thrust::for_each promises that, thrust::transform_reduce does not (its
// OpenMP and CUDA versions happen to transform each index once). The values
// go through a scratch array of n doubles and a plain reduce. With slice > 0
// the indices go in consecutive calls of at most `slice` each, one after the
// other: no more than `slice` of them are in flight at once.
template <typename F>
double for_each_sum(int64_t n, const F& f, int64_t slice = 0) {
  if (n <= 0) return 0.0;
  if (slice <= 0) slice = n;
  Scratch<double> values(static_cast<size_t>(n));
  for (int64_t begin = 0; begin < n; begin += slice) {
    thrust::for_each(policy(), thrust::counting_iterator<int64_t>(begin),
                     thrust::counting_iterator<int64_t>(std::min(n, begin + slice)),
                     StoreEach<F>{f, values.get()});
  }
  return thrust::reduce(policy(), values.get(), values.get() + n, 0.0, thrust::plus<double>());
}

}  // namespace parafab::kernels::detail
