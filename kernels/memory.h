// Backend memory: host heap on the OpenMP backend (64-byte aligned; blocks of
// 2 MiB or more aligned to 2 MiB and advised to use transparent huge pages),
// cudaMalloc'd device memory under PARAFAB_CUDA. Copies are synchronous.
// Failures throw std::runtime_error naming the size (and cudaGetErrorString).
#pragma once

#include <cstddef>
#include <string>

namespace parafab::kernels {

void* device_alloc(size_t bytes);
void device_free(void* p) noexcept;
// Temporaries of one kernel call (Thrust's own included). Under PARAFAB_CUDA
// they come from the device's stream-ordered pool (cudaMallocAsync on the
// default stream, where every kernel runs): a free does not wait for the
// device, and the pool keeps the memory for the next call, where
// cudaMalloc/cudaFree would cost two driver calls and a device-wide
// synchronisation per call. Devices without pools fall back to
// device_alloc. On the host: device_alloc's heap.
void* scratch_alloc(size_t bytes);
void scratch_free(void* p) noexcept;
void copy_to_device(void* dst, const void* src, size_t bytes);
void copy_to_host(void* dst, const void* src, size_t bytes);
void device_fill_zero(void* dst, size_t bytes);
void device_synchronize();

// "OpenMP host backend (2 threads)" or "CUDA device 0: NVIDIA H200 (sm_90)".
std::string backend_description();
// Sets the number of host threads the OpenMP backend uses (no-op on CUDA for
// the kernels themselves).
void set_host_threads(int threads);

}  // namespace parafab::kernels
