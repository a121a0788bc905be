#include "benchmarks/memory_ceiling.h"

#include <fmt/format.h>
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

#include "parafab/config.h"

#if PARAFAB_CUDA
#include <cuda_runtime.h>
#endif

namespace parafab::benchmarks {
namespace {

using Clock = std::chrono::steady_clock;

size_t last_level_cache_bytes() {
  long llc = -1;
#ifdef _SC_LEVEL3_CACHE_SIZE
  llc = sysconf(_SC_LEVEL3_CACHE_SIZE);
  if (llc <= 0) llc = sysconf(_SC_LEVEL2_CACHE_SIZE);
#endif
  return llc > 0 ? static_cast<size_t>(llc) : size_t{32} << 20;
}

struct HostBuffer {
  explicit HostBuffer(size_t n) : p(static_cast<char*>(std::aligned_alloc(4096, n))) {
    if (p == nullptr) {
      throw std::runtime_error(fmt::format("memory ceiling: cannot allocate {} bytes", n));
    }
  }
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;
  ~HostBuffer() { std::free(p); }
  char* p;
};

#if PARAFAB_CUDA
void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    (void)cudaGetLastError();  // clear it: the thread's next CUDA call would report it again
    throw std::runtime_error(
        fmt::format("memory ceiling: {} failed: {}", what, cudaGetErrorString(e)));
  }
}

// Device buffers and events freed however the measurement ends.
struct DeviceCopyResources {
  void* src = nullptr;
  void* dst = nullptr;
  cudaEvent_t start{};
  cudaEvent_t stop{};
  DeviceCopyResources() = default;
  DeviceCopyResources(const DeviceCopyResources&) = delete;
  DeviceCopyResources& operator=(const DeviceCopyResources&) = delete;
  ~DeviceCopyResources() {
    if (start != nullptr) cudaEventDestroy(start);
    if (stop != nullptr) cudaEventDestroy(stop);
    cudaFree(src);  // cudaFree(nullptr) is a no-op
    cudaFree(dst);
  }
};

MemoryCeiling measure_device_copy(int repetitions) {
  const size_t bytes = size_t{1} << 30;  // far above any L2
  DeviceCopyResources r;
  check(cudaMalloc(&r.src, bytes), "cudaMalloc");
  check(cudaMalloc(&r.dst, bytes), "cudaMalloc");
  check(cudaEventCreate(&r.start), "cudaEventCreate");
  check(cudaEventCreate(&r.stop), "cudaEventCreate");
  check(cudaMemset(r.src, 1, bytes), "cudaMemset");
  check(cudaMemset(r.dst, 2, bytes), "cudaMemset");
  check(cudaMemcpy(r.dst, r.src, bytes, cudaMemcpyDeviceToDevice), "cudaMemcpy");  // warm-up
  float best_ms = 0.0f;
  for (int i = 0; i < repetitions; ++i) {
    check(cudaEventRecord(r.start), "cudaEventRecord");
    check(cudaMemcpy(r.dst, r.src, bytes, cudaMemcpyDeviceToDevice), "cudaMemcpy");
    check(cudaEventRecord(r.stop), "cudaEventRecord");
    check(cudaEventSynchronize(r.stop), "cudaEventSynchronize");
    float ms = 0.0f;
    check(cudaEventElapsedTime(&ms, r.start, r.stop), "cudaEventElapsedTime");
    if (i == 0 || ms < best_ms) best_ms = ms;
  }
  MemoryCeiling c;
  c.bytes_per_second = 2.0 * static_cast<double>(bytes) / (static_cast<double>(best_ms) * 1e-3);
  c.source = "cudaMemcpy D2D";
  c.detail = fmt::format("cudaMemcpy device-to-device of {} MiB, read+write counted, best of {}",
                         bytes >> 20, repetitions);
  c.buffer_bytes = bytes;
  c.threads = 1;
  return c;
}
#endif

}  // namespace

MemoryCeiling measure_host_memcpy(int threads, size_t buffer_bytes, int repetitions) {
  threads = std::max(threads, 1);
  repetitions = std::max(repetitions, 1);
  if (buffer_bytes == 0) {
    buffer_bytes = std::clamp(4 * last_level_cache_bytes(), size_t{64} << 20, size_t{1} << 30);
  }
  // Equal, page-aligned shares.
  const size_t share = (buffer_bytes / static_cast<size_t>(threads)) / 4096 * 4096;
  buffer_bytes = share * static_cast<size_t>(threads);
  HostBuffer src(buffer_bytes);
  HostBuffer dst(buffer_bytes);

  double best = 0.0;
  for (int r = -1; r < repetitions; ++r) {  // r = -1: warm-up, first touch by the copying thread
    const auto t0 = Clock::now();
#pragma omp parallel num_threads(threads)
    {
      const auto t = static_cast<size_t>(omp_get_thread_num());
      if (r < 0) std::memset(src.p + t * share, static_cast<int>(t + 1), share);
      std::memcpy(dst.p + t * share, src.p + t * share, share);
    }
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    if (r >= 0 && (best == 0.0 || s < best)) best = s;
  }
  MemoryCeiling c;
  c.bytes_per_second = 2.0 * static_cast<double>(buffer_bytes) / best;
  c.source = "memcpy";
  c.detail = fmt::format("memcpy of {} MiB by {} thread{}, read+write counted, best of {}",
                         buffer_bytes >> 20, threads, threads == 1 ? "" : "s", repetitions);
  c.buffer_bytes = buffer_bytes;
  c.threads = threads;
  return c;
}

MemoryCeiling measure_memory_ceiling(int threads, int repetitions, size_t host_buffer_bytes) {
#if PARAFAB_CUDA
  (void)threads;
  (void)host_buffer_bytes;
  return measure_device_copy(std::max(repetitions, 1));
#else
  return measure_host_memcpy(threads, host_buffer_bytes, repetitions);
#endif
}

}  // namespace parafab::benchmarks
