// ByteBuffer: the bytes of one message, as the endpoint hands them over and
// as senders build them.
//
//   rdma::ByteBuffer b(bytes);            // uninitialised, like malloc
//   std::memcpy(b.data(), src, bytes);
//   rdma::ByteBuffer copy = rdma::byte_buffer_of(span);
//
// Its allocator (UninitializedAllocator) does two things:
// - resize() leaves bytes uninitialised: a received message is overwritten
//   by the fabric at once, and zero-filling megabytes first would cost as
//   much as the copy;
// - blocks of 128 KiB to 16 MiB come from, and go back to, a cache of
//   recently freed blocks kept by each thread (at most 4 of a size class,
//   32 MiB in all, freed when the thread ends). A message of a few megabytes
//   is received into a fresh buffer, handed over, and freed by its reader;
//   from malloc, such a buffer was mostly new memory that the kernel faulted
//   in and zeroed page by page during the copy into it (shm 4 MiB one way:
//   260 page faults a message). Sizes are rounded up to a class, four per
//   power of two (at most 25% more), so messages of about one size share
//   blocks. bench fabric's shm ping-pong, four alternating runs against the
//   binary without the cache, of fi_pingpong: 4 MiB 0.90-1.00 (mean 0.94)
//   against 0.83-0.90 (0.87); 1 MiB 0.81-0.92 (0.88) against 0.74-0.86
//   (0.80). Per thread, not one cache for the process, so that a block stays
//   with the core that last wrote it: with one shared cache from 64 KiB up,
//   the shm 64 KiB ping-pong ran at 0.79 of fi_pingpong against 0.86
//   (five alternating runs). Below 128 KiB malloc keeps freed blocks itself.
// Under AddressSanitizer a cached block is poisoned until it is handed out
// again, so a use after free is still caught.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>
#include <span>
#include <utility>
#include <vector>

namespace parafab::rdma {

namespace detail {

// Whether this build has AddressSanitizer (GCC defines __SANITIZE_ADDRESS__;
// clang 14 only answers __has_feature): cached blocks are poisoned then.
#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool kAddressSanitizer = true;
#elif defined(__has_feature)
inline constexpr bool kAddressSanitizer = __has_feature(address_sanitizer);
#else
inline constexpr bool kAddressSanitizer = false;
#endif

// Blocks smaller than this, or larger than kMaxCachedBlock, go straight to
// operator new and delete.
inline constexpr size_t kMinCachedBlock = size_t{128} << 10;
inline constexpr size_t kMaxCachedBlock = size_t{16} << 20;
inline constexpr size_t kBlocksPerClass = 4;
inline constexpr size_t kMaxCachedBytes = size_t{32} << 20;  // per thread

// The bytes a request of `bytes` occupies: itself below kMinCachedBlock or
// above kMaxCachedBlock, else rounded up to its class.
size_t block_class_bytes(size_t bytes);

void* allocate_block(size_t bytes);
// `bytes` as given to allocate_block.
void deallocate_block(void* p, size_t bytes) noexcept;

}  // namespace detail

struct BlockCacheStats {
  uint64_t reused = 0;       // requests served from the cache
  uint64_t allocated = 0;    // cacheable requests served by operator new
  uint64_t released = 0;     // cacheable blocks freed because the cache was full (or its thread ended)
  size_t cached_bytes = 0;   // held now, all threads
  size_t cached_blocks = 0;  // held now, all threads
};
BlockCacheStats block_cache_stats();

template <typename T>
struct UninitializedAllocator : std::allocator<T> {
  template <typename U>
  struct rebind {
    using other = UninitializedAllocator<U>;
  };
  UninitializedAllocator() = default;
  template <typename U>
  UninitializedAllocator(const UninitializedAllocator<U>&) noexcept {}

  T* allocate(size_t n) {
    if (n > SIZE_MAX / sizeof(T)) throw std::bad_array_new_length();
    return static_cast<T*>(detail::allocate_block(n * sizeof(T)));
  }
  void deallocate(T* p, size_t n) noexcept { detail::deallocate_block(p, n * sizeof(T)); }

  template <typename U>
  void construct(U* p) noexcept {
    ::new (static_cast<void*>(p)) U;  // default-, not value-initialised
  }
  template <typename U, typename... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
};
using ByteBuffer = std::vector<std::byte, UninitializedAllocator<std::byte>>;

// A ByteBuffer holding a copy of `bytes`. Use it rather than the iterator
// constructor or assign(): with an allocator that has its own construct(),
// those copy byte by byte (measured: 64 KiB took longer than its transfer).
inline ByteBuffer byte_buffer_of(std::span<const std::byte> bytes) {
  ByteBuffer b(bytes.size());
  if (!bytes.empty()) std::memcpy(b.data(), bytes.data(), bytes.size());
  return b;
}

}  // namespace parafab::rdma
