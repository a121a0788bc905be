// Backend memory: host heap on the OpenMP backend (64-byte aligned; blocks of
// 2 MiB or more aligned to 2 MiB and advised to use transparent huge pages).
// Under PARAFAB_CUDA, device memory from the device's stream-ordered pool
// (cudaMallocAsync on the default stream, where every kernel runs; the pool
// told to keep what is freed): the trainers' per-batch arrays and every
// kernel's temporaries, Thrust's own included, are then taken and given
// back without cudaMalloc and cudaFree, whose free waits for the whole
// device. A free waits for nothing: it takes effect after the work queued
// so far. Devices without pools get cudaMalloc. Copies are synchronous.
// Failures throw std::runtime_error naming the size (and cudaGetErrorString).
#pragma once

#include <cstddef>
#include <string>

namespace parafab::kernels {

void* device_alloc(size_t bytes);
void device_free(void* p) noexcept;
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
