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
// gathers over w are random, and the out-of-order window alone keeps too
// few of their misses in flight (measured: 25-30% faster per pass at 32
// with 2^20 slots). The gradient's scatter does without: with the
// Zipf-skewed slots most of its adds hit lines already in cache, and the
// prefetch's own load and bound check cost more than it saved (bench
// kernels, 2 threads: logistic 0.29-0.32 -> 0.31-0.32 of memcpy, the
// batch-local case 0.42 -> 0.43-0.44). A no-op in device code.
inline constexpr uint64_t kPrefetchDistance = 32;

PARAFAB_HD inline void prefetch(const void* p) {
#if !defined(__CUDA_ARCH__) && (defined(__GNUC__) || defined(__clang__))
  __builtin_prefetch(p, 0, 3);
#else
  (void)p;
#endif
}

}  // namespace parafab::kernels::detail
