// Page-locked host memory and copies between it and device memory: what
// DeviceStaging needs from CUDA, kept apart so the rest of rdma/ is plain
// C++. CUDA builds use cudaHostAlloc/cudaMemcpy; host builds (no device
// memory exists) use aligned host memory and memcpy, so the staging path is
// the same code and is tested in CI.
#pragma once

#include <cstddef>
#include <memory>

namespace parafab::rdma {

struct PinnedDeleter {
  void operator()(std::byte* p) const;
};
using PinnedBuffer = std::unique_ptr<std::byte[], PinnedDeleter>;

// Throws std::runtime_error naming the size when allocation fails.
PinnedBuffer allocate_pinned(size_t bytes);
// dst/src may be device or host pointers (cudaMemcpyDefault); throws
// std::runtime_error with the CUDA error text on failure.
void copy_memory(void* dst, const void* src, size_t bytes);

}  // namespace parafab::rdma
