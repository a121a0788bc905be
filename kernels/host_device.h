// Private to kernels/: marks functions and functors that run on the active
// backend. nvcc compiles them for host and device; g++ sees plain functions.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define PARAFAB_HD __host__ __device__
#else
#define PARAFAB_HD
#endif

namespace parafab::kernels::detail {

// Nonzeros ahead of the current one whose slot the host loops prefetch: the
// gathers and scatters over w and grad are random, and the out-of-order
// window alone keeps too few of their misses in flight (measured: 25-30%
// faster per pass at 32 with 2^20 slots). A no-op in device code.
inline constexpr uint64_t kPrefetchDistance = 32;

PARAFAB_HD inline void prefetch(const void* p) {
#if !defined(__CUDA_ARCH__) && (defined(__GNUC__) || defined(__clang__))
  __builtin_prefetch(p, 0, 3);
#else
  (void)p;
#endif
}

PARAFAB_HD inline void prefetch_for_write(const void* p) {
#if !defined(__CUDA_ARCH__) && (defined(__GNUC__) || defined(__clang__))
  __builtin_prefetch(p, 1, 3);
#else
  (void)p;
#endif
}

}  // namespace parafab::kernels::detail
