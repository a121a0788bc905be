// The memory-bandwidth ceiling that kernel throughputs are compared with,
// measured in the same run and with the same parallelism as the kernels.
//
//   MemoryCeiling c = measure_memory_ceiling(/*threads=*/2);
//   double ratio = kernel_bytes_per_s / c.bytes_per_second;
//
// Host (OpenMP backend): `threads` threads each memcpy their contiguous share
// of a source buffer into a destination buffer, both 4x the last-level cache
// (within [64 MiB, 1 GiB]); bandwidth counts bytes read plus bytes written (2x the
// buffer) per second. CUDA: cudaMemcpy device-to-device, counted the same way.
// Each repetition is timed, after one untimed warm-up that also faults the
// pages in; the best repetition is the ceiling.
#pragma once

#include <cstddef>
#include <string>

namespace parafab::benchmarks {

struct MemoryCeiling {
  double bytes_per_second = 0.0;  // bytes read + bytes written, per second
  std::string source;             // "memcpy" (host) or "cudaMemcpy D2D" (device)
  std::string detail;             // buffer size, threads, repetitions, in words
  size_t buffer_bytes = 0;        // size of each of the two buffers
  int threads = 1;                // host threads (1 on CUDA)
};

// The ceiling of the active backend: host memcpy with `threads` threads, or a
// device-to-device copy under PARAFAB_CUDA.
// host_buffer_bytes as for measure_host_memcpy (ignored on CUDA).
MemoryCeiling measure_memory_ceiling(int threads, int repetitions = 5,
                                     size_t host_buffer_bytes = 0);

// The host measurement alone; buffer_bytes 0 picks 4x the last-level cache.
MemoryCeiling measure_host_memcpy(int threads, size_t buffer_bytes = 0, int repetitions = 5);

}  // namespace parafab::benchmarks
