// Backend memory. The OpenMP backend uses the host heap, 64-byte aligned so
// that arrays start on a cache line (and AVX-512 loads never split); under
// PARAFAB_CUDA it is device memory from the device's stream-ordered pool
// (cudaMalloc where the device has none) and synchronous copies.
#include "kernels/memory.h"

#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>

#include "parafab/config.h"

#if PARAFAB_CUDA
#include <cuda_runtime.h>
#else
#include <omp.h>
#include <sys/mman.h>
#endif

namespace parafab::kernels {

#if PARAFAB_CUDA

namespace {

void check_cuda(cudaError_t err, const char* what, size_t bytes) {
  if (err != cudaSuccess) {
    (void)cudaGetLastError();  // clear the error so later calls do not report it again
    throw std::runtime_error(std::string("parafab::kernels: ") + what + " of " +
                             std::to_string(bytes) + " bytes failed: " + cudaGetErrorString(err) +
                             " (" + cudaGetErrorName(err) + ")");
  }
}

// Whether the current device has a stream-ordered pool, told once to keep
// what is freed into it (release threshold: everything; by default it
// gives memory back at every synchronisation). The first call decides for
// the process, which uses one device.
bool pool_ready() {
  static const bool ready = [] {
    int dev = 0;
    int supported = 0;
    cudaMemPool_t pool{};
    uint64_t keep = UINT64_MAX;
    const bool ok = cudaGetDevice(&dev) == cudaSuccess &&
                    cudaDeviceGetAttribute(&supported, cudaDevAttrMemoryPoolsSupported, dev) ==
                        cudaSuccess &&
                    supported != 0 && cudaDeviceGetDefaultMemPool(&pool, dev) == cudaSuccess &&
                    cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep) ==
                        cudaSuccess;
    if (!ok) (void)cudaGetLastError();  // not an error: cudaMalloc serves instead
    return ok;
  }();
  return ready;
}

}  // namespace

void* device_alloc(size_t bytes) {
  if (bytes == 0) return nullptr;
  void* p = nullptr;
  if (pool_ready()) {
    check_cuda(cudaMallocAsync(&p, bytes, 0), "cudaMallocAsync", bytes);
  } else {
    check_cuda(cudaMalloc(&p, bytes), "cudaMalloc", bytes);
  }
  return p;
}

void device_free(void* p) noexcept {
  if (p == nullptr) return;
  if (pool_ready()) {
    (void)cudaFreeAsync(p, 0);  // after the work queued so far, which may use p
  } else {
    (void)cudaFree(p);
  }
}

void copy_to_device(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  check_cuda(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), "cudaMemcpy host-to-device",
             bytes);
}

void copy_to_host(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  check_cuda(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy device-to-host",
             bytes);
}

void device_fill_zero(void* dst, size_t bytes) {
  if (bytes == 0) return;
  check_cuda(cudaMemset(dst, 0, bytes), "cudaMemset", bytes);
}

void device_synchronize() { check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize", 0); }

std::string backend_description() {
  int dev = 0;
  cudaDeviceProp prop{};
  if (cudaGetDevice(&dev) != cudaSuccess || cudaGetDeviceProperties(&prop, dev) != cudaSuccess) {
    return "CUDA backend (no device available)";
  }
  return "CUDA device " + std::to_string(dev) + ": " + prop.name + " (sm_" +
         std::to_string(prop.major) + std::to_string(prop.minor) + ")";
}

void set_host_threads(int /*threads*/) {}

#else  // OpenMP host backend

namespace {

constexpr size_t kAlignment = 64;
// Arrays of at least a huge page are aligned to one and advised to use
// transparent huge pages (the kernel's default is "madvise" on Debian): the
// kernels gather and scatter at random over weight and gradient arrays of
// megabytes, and with 4 KiB pages the TLB misses, not the cache, set their
// speed (measured here: random gathers over 8 MiB went from 4.2 to 1.9 ns).
constexpr size_t kHugePage = size_t{2} << 20;

}  // namespace

void* device_alloc(size_t bytes) {
  if (bytes == 0) return nullptr;
  const size_t alignment = bytes >= kHugePage ? kHugePage : kAlignment;
  // aligned_alloc wants a multiple of the alignment.
  const size_t rounded = (bytes + alignment - 1) / alignment * alignment;
  if (rounded < bytes) {
    throw std::runtime_error("parafab::kernels: allocation of " + std::to_string(bytes) +
                             " bytes overflows");
  }
  void* p = std::aligned_alloc(alignment, rounded);
  if (p == nullptr) {
    throw std::runtime_error("parafab::kernels: host allocation of " + std::to_string(bytes) +
                             " bytes (aligned to " + std::to_string(alignment) + ") failed");
  }
#ifdef MADV_HUGEPAGE
  if (alignment == kHugePage) (void)madvise(p, rounded, MADV_HUGEPAGE);  // advice only
#endif
  return p;
}

void device_free(void* p) noexcept { std::free(p); }

void copy_to_device(void* dst, const void* src, size_t bytes) {
  if (bytes != 0) std::memcpy(dst, src, bytes);
}

void copy_to_host(void* dst, const void* src, size_t bytes) {
  if (bytes != 0) std::memcpy(dst, src, bytes);
}

void device_fill_zero(void* dst, size_t bytes) {
  if (bytes != 0) std::memset(dst, 0, bytes);
}

void device_synchronize() {}

std::string backend_description() {
  const int n = omp_get_max_threads();
  return "OpenMP host backend (" + std::to_string(n) + (n == 1 ? " thread)" : " threads)");
}

void set_host_threads(int threads) {
  if (threads < 1) {
    throw std::invalid_argument("parafab::kernels::set_host_threads: threads must be >= 1, got " +
                                std::to_string(threads));
  }
  // Sets the calling thread's nthreads-var: the parallel regions the kernels
  // open from this thread use that many threads.
  omp_set_num_threads(threads);
}

#endif

}  // namespace parafab::kernels
