#include "rdma/byte_buffer.h"

#include <array>
#include <atomic>
#include <bit>

#include <sanitizer/asan_interface.h>

namespace parafab::rdma {
namespace detail {
namespace {

constexpr int kMinExponent = std::countr_zero(kMinCachedBlock);
constexpr int kMaxExponent = std::countr_zero(kMaxCachedBlock);
constexpr size_t kClasses = static_cast<size_t>(kMaxExponent - kMinExponent) * 4 + 1;

bool cacheable(size_t bytes) { return bytes >= kMinCachedBlock && bytes <= kMaxCachedBlock; }

// Class of a cacheable size: 4 * (e - kMinExponent) + (k - 4) where the
// class is k * 2^(e - 2), 4 <= k < 8.
size_t class_index(size_t class_bytes) {
  const int e = std::bit_width(class_bytes) - 1;
  const size_t k = class_bytes >> (e - 2);
  return static_cast<size_t>(e - kMinExponent) * 4 + (k - 4);
}

void poison(void* p, size_t bytes) {
  if constexpr (kAddressSanitizer) __asan_poison_memory_region(p, bytes);
}

void unpoison(void* p, size_t bytes) {
  if constexpr (kAddressSanitizer) __asan_unpoison_memory_region(p, bytes);
}

// Process-wide counters (BlockCacheStats), relaxed: figures, not guards.
struct Counters {
  std::atomic<uint64_t> reused{0}, allocated{0}, released{0};
  std::atomic<size_t> cached_bytes{0}, cached_blocks{0};
};
Counters g_counters;

// Set when this thread's cache is destroyed (thread exit): blocks freed
// later by other thread_local destructors go straight to operator delete.
// Trivially destructible, so it can be read until the thread is gone.
thread_local bool t_cache_gone = false;

struct ThreadCache {
  struct Class {
    std::array<void*, kBlocksPerClass> blocks{};
    size_t count = 0;
  };
  std::array<Class, kClasses> classes{};
  size_t cached_bytes = 0;

  ~ThreadCache() {
    t_cache_gone = true;
    for (size_t i = 0; i < kClasses; ++i) {
      Class& k = classes[i];
      const size_t bytes = class_bytes_of(i);
      for (size_t j = 0; j < k.count; ++j) {
        unpoison(k.blocks[j], bytes);
        ::operator delete(k.blocks[j]);
      }
      g_counters.cached_blocks.fetch_sub(k.count, std::memory_order_relaxed);
      g_counters.cached_bytes.fetch_sub(k.count * bytes, std::memory_order_relaxed);
    }
  }

  static size_t class_bytes_of(size_t index) {
    const int e = kMinExponent + static_cast<int>(index / 4);
    return (4 + index % 4) << (e - 2);
  }
};

ThreadCache* thread_cache() {
  if (t_cache_gone) return nullptr;
  thread_local ThreadCache cache;
  return &cache;
}

}  // namespace

size_t block_class_bytes(size_t bytes) {
  if (!cacheable(bytes)) return bytes;
  const int e = std::bit_width(bytes) - 1;
  const size_t step = size_t{1} << (e - 2);
  return (bytes + step - 1) / step * step;
}

void* allocate_block(size_t bytes) {
  if (!cacheable(bytes)) return ::operator new(bytes);
  const size_t class_bytes = block_class_bytes(bytes);
  if (ThreadCache* c = thread_cache(); c != nullptr) {
    ThreadCache::Class& k = c->classes[class_index(class_bytes)];
    if (k.count > 0) {
      void* p = k.blocks[--k.count];
      c->cached_bytes -= class_bytes;
      g_counters.reused.fetch_add(1, std::memory_order_relaxed);
      g_counters.cached_blocks.fetch_sub(1, std::memory_order_relaxed);
      g_counters.cached_bytes.fetch_sub(class_bytes, std::memory_order_relaxed);
      unpoison(p, class_bytes);
      return p;
    }
  }
  g_counters.allocated.fetch_add(1, std::memory_order_relaxed);
  return ::operator new(class_bytes);
}

void deallocate_block(void* p, size_t bytes) noexcept {
  if (p == nullptr) return;
  if (!cacheable(bytes)) {
    ::operator delete(p);
    return;
  }
  const size_t class_bytes = block_class_bytes(bytes);
  if (ThreadCache* c = thread_cache(); c != nullptr) {
    ThreadCache::Class& k = c->classes[class_index(class_bytes)];
    if (k.count < kBlocksPerClass && c->cached_bytes + class_bytes <= kMaxCachedBytes) {
      poison(p, class_bytes);
      k.blocks[k.count++] = p;
      c->cached_bytes += class_bytes;
      g_counters.cached_blocks.fetch_add(1, std::memory_order_relaxed);
      g_counters.cached_bytes.fetch_add(class_bytes, std::memory_order_relaxed);
      return;
    }
  }
  g_counters.released.fetch_add(1, std::memory_order_relaxed);
  ::operator delete(p);
}

}  // namespace detail

BlockCacheStats block_cache_stats() {
  const detail::Counters& c = detail::g_counters;
  BlockCacheStats s;
  s.reused = c.reused.load(std::memory_order_relaxed);
  s.allocated = c.allocated.load(std::memory_order_relaxed);
  s.released = c.released.load(std::memory_order_relaxed);
  s.cached_bytes = c.cached_bytes.load(std::memory_order_relaxed);
  s.cached_blocks = c.cached_blocks.load(std::memory_order_relaxed);
  return s;
}

}  // namespace parafab::rdma
