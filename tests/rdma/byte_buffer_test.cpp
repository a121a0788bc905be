// ByteBuffer's block cache: a freed large block serves the thread's next
// request of its class, small and huge ones bypass it, the cache stays
// within its bounds and is emptied when its thread ends, and buffers keep
// their bytes under concurrent use, freed on other threads too (this suite
// runs under ASan, which also checks the poisoning, and TSan in CI).
#include "rdma/byte_buffer.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <thread>
#include <vector>

namespace parafab::rdma {
namespace {

using detail::block_class_bytes;
using detail::kMaxCachedBlock;
using detail::kMaxCachedBytes;
using detail::kMinCachedBlock;

TEST(ByteBuffer, ClassesRoundUpByAtMostAQuarter) {
  EXPECT_EQ(block_class_bytes(100), 100u);  // below the cache: as asked
  EXPECT_EQ(block_class_bytes(kMaxCachedBlock + 1), kMaxCachedBlock + 1);
  EXPECT_EQ(block_class_bytes(kMinCachedBlock), kMinCachedBlock);
  EXPECT_EQ(block_class_bytes(size_t{1} << 20), size_t{1} << 20);
  EXPECT_EQ(block_class_bytes((size_t{1} << 20) + 40), (size_t{5} << 20) / 4);  // 1 MiB + a header
  EXPECT_EQ(block_class_bytes((size_t{4} << 20) + 40), size_t{5} << 20);
  EXPECT_EQ(block_class_bytes(kMaxCachedBlock), kMaxCachedBlock);
  std::mt19937_64 rng(3);
  for (int i = 0; i < 10000; ++i) {
    const size_t n = kMinCachedBlock + rng() % (kMaxCachedBlock - kMinCachedBlock + 1);
    const size_t c = block_class_bytes(n);
    ASSERT_GE(c, n);
    ASSERT_LE(c - n, n / 4) << n;
    ASSERT_LE(c, kMaxCachedBlock) << n;
  }
}

TEST(ByteBuffer, AFreedLargeBlockServesTheNextRequestOfItsClass) {
  const size_t n = (size_t{2} << 20) + 40;
  const std::byte* first = nullptr;
  {
    ByteBuffer b(n);
    first = b.data();
    b[0] = std::byte{1};
    b[n - 1] = std::byte{2};
  }
  const BlockCacheStats before = block_cache_stats();
  ByteBuffer again(n + 1000);  // another size of the same class
  EXPECT_EQ(again.data(), first);
  EXPECT_EQ(block_cache_stats().reused, before.reused + 1);
  std::memset(again.data(), 7, again.size());  // the whole class is usable
}

TEST(ByteBuffer, SmallAndHugeBuffersBypassTheCache) {
  const BlockCacheStats before = block_cache_stats();
  { ByteBuffer small(kMinCachedBlock - 1); }
  { ByteBuffer huge(kMaxCachedBlock + 1); }
  const BlockCacheStats after = block_cache_stats();
  EXPECT_EQ(after.reused, before.reused);
  EXPECT_EQ(after.allocated, before.allocated);
  EXPECT_EQ(after.cached_blocks, before.cached_blocks);
}

TEST(ByteBuffer, TheCacheStaysWithinItsBounds) {
  // Ten blocks of each of several classes freed at once: at most
  // kBlocksPerClass of a class and kMaxCachedBytes in all are kept (this
  // thread is the only one caching).
  std::vector<ByteBuffer> live;
  for (size_t mib : {1, 3, 6, 12, 16}) {
    for (int i = 0; i < 10; ++i) live.emplace_back(mib << 20);
  }
  const BlockCacheStats before = block_cache_stats();
  live.clear();
  const BlockCacheStats after = block_cache_stats();
  EXPECT_LE(after.cached_bytes, kMaxCachedBytes);
  EXPECT_LE(after.cached_blocks, 5 * detail::kBlocksPerClass);
  EXPECT_GT(after.released, before.released);
  // What was not kept was freed: every one of the 50 is either.
  EXPECT_EQ((after.cached_blocks - before.cached_blocks) + (after.released - before.released), 50u);
}

TEST(ByteBuffer, AThreadsCachedBlocksAreFreedWhenItEnds) {
  const BlockCacheStats before = block_cache_stats();
  ByteBuffer handed_over;
  std::thread t([&] {
    { ByteBuffer mine(size_t{3} << 20); }  // cached by t
    handed_over = ByteBuffer(size_t{5} << 20);
    EXPECT_EQ(block_cache_stats().cached_blocks, before.cached_blocks + 1);
  });
  t.join();
  EXPECT_EQ(block_cache_stats().cached_blocks, before.cached_blocks);
  EXPECT_EQ(block_cache_stats().cached_bytes, before.cached_bytes);
  // A block allocated on t and freed on u joins u's cache, until u ends.
  std::thread u([&] {
    handed_over = ByteBuffer();
    EXPECT_EQ(block_cache_stats().cached_blocks, before.cached_blocks + 1);
  });
  u.join();
  EXPECT_EQ(block_cache_stats().cached_blocks, before.cached_blocks);
}

// A block waiting in the cache is poisoned: reading a freed buffer through
// a stale pointer is reported as it would be after a real free.
TEST(ByteBufferDeathTest, ReadingACachedBlockIsReportedUnderAsan) {
  if (!detail::kAddressSanitizer) GTEST_SKIP() << "not an AddressSanitizer build";
  EXPECT_DEATH(
      {
        const std::byte* stale = nullptr;
        {
          ByteBuffer b(size_t{1} << 20);
          stale = b.data();
        }
        volatile std::byte x = stale[100];
        (void)x;
      },
      "use-after-poison");
}

TEST(ByteBuffer, BuffersKeepTheirBytesUnderConcurrentUse) {
  constexpr int kThreads = 4, kRounds = 300;
  std::vector<std::thread> threads;
  std::vector<int> failures(kThreads, 0);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([t, &failures] {
      std::mt19937_64 rng(100 + t);
      std::vector<ByteBuffer> held;
      for (int r = 0; r < kRounds; ++r) {
        const size_t n = kMinCachedBlock / 2 + rng() % (size_t{3} << 20);
        ByteBuffer b(n);
        const auto mark = static_cast<std::byte>(t * 31 + r);
        std::memset(b.data(), static_cast<int>(mark), n);
        held.push_back(std::move(b));
        if (held.size() > 3 || rng() % 2 == 0) {
          const ByteBuffer& old = held.front();
          const std::byte want = old[0];
          for (size_t i = 0; i < old.size(); i += 4093) failures[t] += old[i] != want ? 1 : 0;
          failures[t] += old[old.size() - 1] != want ? 1 : 0;
          held.erase(held.begin());
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(failures[t], 0) << "thread " << t;
  // Buffers made on one thread and freed on another, while both run.
  std::vector<ByteBuffer> made(200);
  std::thread maker([&] {
    for (size_t i = 0; i < made.size(); ++i) {
      made[i] = ByteBuffer(kMinCachedBlock + i * 4096);
      std::memset(made[i].data(), static_cast<int>(i % 251), made[i].size());
    }
  });
  maker.join();
  std::thread checker([&] {
    for (size_t i = 0; i < made.size(); ++i) {
      EXPECT_EQ(made[i][made[i].size() - 1], static_cast<std::byte>(i % 251)) << i;
      made[i] = ByteBuffer();
    }
  });
  checker.join();
}

}  // namespace
}  // namespace parafab::rdma
