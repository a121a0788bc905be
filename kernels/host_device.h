// Private to kernels/: marks functions and functors that run on the active
// backend. nvcc compiles them for host and device; g++ sees plain functions.
#pragma once

#if defined(__CUDACC__)
#define PARAFAB_HD __host__ __device__
#else
#define PARAFAB_HD
#endif
