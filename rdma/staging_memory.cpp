#include "rdma/staging_memory.h"

#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>

#include "parafab/config.h"

#if PARAFAB_CUDA
#include <cuda_runtime_api.h>
#endif

namespace parafab::rdma {

#if PARAFAB_CUDA

void PinnedDeleter::operator()(std::byte* p) const { (void)cudaFreeHost(p); }

PinnedBuffer allocate_pinned(size_t bytes) {
  void* p = nullptr;
  const cudaError_t rc = cudaHostAlloc(&p, bytes == 0 ? 1 : bytes, cudaHostAllocPortable);
  if (rc != cudaSuccess) {
    (void)cudaGetLastError();  // clear it: the thread's next CUDA call would report it again
    throw std::runtime_error("cudaHostAlloc of " + std::to_string(bytes) + " bytes: " + cudaGetErrorString(rc));
  }
  return PinnedBuffer(static_cast<std::byte*>(p));
}

void copy_memory(void* dst, const void* src, size_t bytes) {
  const cudaError_t rc = cudaMemcpy(dst, src, bytes, cudaMemcpyDefault);
  if (rc != cudaSuccess) {
    (void)cudaGetLastError();
    throw std::runtime_error("cudaMemcpy of " + std::to_string(bytes) + " bytes: " + cudaGetErrorString(rc));
  }
}

#else

void PinnedDeleter::operator()(std::byte* p) const { std::free(p); }

PinnedBuffer allocate_pinned(size_t bytes) {
  const size_t rounded = (bytes + 4095) / 4096 * 4096;
  void* p = std::aligned_alloc(4096, rounded == 0 ? 4096 : rounded);
  if (p == nullptr) throw std::runtime_error("allocation of " + std::to_string(bytes) + " staging bytes failed");
  return PinnedBuffer(static_cast<std::byte*>(p));
}

void copy_memory(void* dst, const void* src, size_t bytes) {
  if (bytes != 0) std::memcpy(dst, src, bytes);
}

#endif

}  // namespace parafab::rdma
