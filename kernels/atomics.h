// Private to kernels/: relaxed atomics on plain arrays, one spelling for both
// backends. With CCCL (the CUDA toolkit's Thrust) they are cuda::atomic_ref
// at device scope, which works in host and device code; with Debian's Thrust
// (host only) they are std::atomic_ref.
//
// Relaxed is enough everywhere they are used: the minibatch gradient only
// needs every fetch_add to land exactly once (the kernel's end orders them
// before the caller reads), and Hogwild tolerates stale reads and lost
// updates by design. What relaxed atomics buy is the absence of data races in
// the C++ sense, so ThreadSanitizer stays clean on the host backend.
#pragma once

#include "kernels/host_device.h"
#include "parafab/config.h"

#if PARAFAB_HAVE_CCCL
#include <cuda/atomic>
#else
#include <atomic>
#endif

namespace parafab::kernels::detail {

#if PARAFAB_HAVE_CCCL
template <typename T>
using AtomicRef = cuda::atomic_ref<T, cuda::thread_scope_device>;
inline constexpr auto kRelaxed = cuda::memory_order_relaxed;
#else
template <typename T>
using AtomicRef = std::atomic_ref<T>;
inline constexpr auto kRelaxed = std::memory_order_relaxed;
#endif

template <typename T>
PARAFAB_HD inline T load_relaxed(const T* p) {
  // atomic_ref needs a non-const referent even for loads; nothing is written.
  return AtomicRef<T>(*const_cast<T*>(p)).load(kRelaxed);
}

template <typename T>
PARAFAB_HD inline void store_relaxed(T* p, T v) {
  AtomicRef<T>(*p).store(v, kRelaxed);
}

template <typename T>
PARAFAB_HD inline void atomic_add_relaxed(T* p, T v) {
  AtomicRef<T>(*p).fetch_add(v, kRelaxed);
}

// The value before the addition.
template <typename T>
PARAFAB_HD inline T fetch_add_relaxed(T* p, T v) {
  return AtomicRef<T>(*p).fetch_add(v, kRelaxed);
}

}  // namespace parafab::kernels::detail
