#include "rdma/byte_buffer.h"

#include <array>
#include <bit>
#include <mutex>

#if defined(__SANITIZE_ADDRESS__)
#define PARAFAB_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define PARAFAB_ASAN 1
#endif
#endif
#if defined(PARAFAB_ASAN)
#include <sanitizer/asan_interface.h>
#endif

namespace parafab::rdma {
namespace detail {
namespace {

constexpr int kMinExponent = std::countr_zero(kMinCachedBlock);  // 16
constexpr int kMaxExponent = std::countr_zero(kMaxCachedBlock);  // 24
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
#if defined(PARAFAB_ASAN)
  ASAN_POISON_MEMORY_REGION(p, bytes);
#else
  (void)p;
  (void)bytes;
#endif
}

void unpoison(void* p, size_t bytes) {
#if defined(PARAFAB_ASAN)
  ASAN_UNPOISON_MEMORY_REGION(p, bytes);
#else
  (void)p;
  (void)bytes;
#endif
}

struct BlockCache {
  std::mutex mu;
  struct Class {
    std::array<void*, kBlocksPerClass> blocks{};
    size_t count = 0;
  };
  std::array<Class, kClasses> classes;
  BlockCacheStats stats;
};

// Never destroyed: buffers freed by static destructors after it would
// otherwise reach a dead cache. The blocks it holds stay reachable.
BlockCache& cache() {
  static BlockCache* c = new BlockCache;
  return *c;
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
  BlockCache& c = cache();
  {
    std::lock_guard lock(c.mu);
    BlockCache::Class& k = c.classes[class_index(class_bytes)];
    if (k.count > 0) {
      void* p = k.blocks[--k.count];
      ++c.stats.reused;
      --c.stats.cached_blocks;
      c.stats.cached_bytes -= class_bytes;
      unpoison(p, class_bytes);
      return p;
    }
    ++c.stats.allocated;
  }
  return ::operator new(class_bytes);
}

void deallocate_block(void* p, size_t bytes) noexcept {
  if (p == nullptr) return;
  if (!cacheable(bytes)) {
    ::operator delete(p, bytes);
    return;
  }
  const size_t class_bytes = block_class_bytes(bytes);
  BlockCache& c = cache();
  {
    std::lock_guard lock(c.mu);
    BlockCache::Class& k = c.classes[class_index(class_bytes)];
    if (k.count < kBlocksPerClass && c.stats.cached_bytes + class_bytes <= kMaxCachedBytes) {
      poison(p, class_bytes);
      k.blocks[k.count++] = p;
      ++c.stats.cached_blocks;
      c.stats.cached_bytes += class_bytes;
      return;
    }
    ++c.stats.released;
  }
  ::operator delete(p, class_bytes);
}

}  // namespace detail

BlockCacheStats block_cache_stats() {
  detail::BlockCache& c = detail::cache();
  std::lock_guard lock(c.mu);
  return c.stats;
}

}  // namespace parafab::rdma
