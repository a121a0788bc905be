// worker::parallel_ranges: every index once, on any split, and a part's
// exception reaches the caller only after every part has ended.
#include "worker/parallel_ranges.h"

#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <string>
#include <vector>

namespace parafab::worker {
namespace {

TEST(ParallelRanges, EveryIndexOnceOnAnySplit) {
  for (const size_t n : {size_t{0}, size_t{1}, size_t{3}, size_t{1000}}) {
    for (const int threads : {0, 1, 2, 5}) {
      std::vector<std::atomic<int>> hits(n);
      parallel_ranges(n, threads, [&](size_t lo, size_t hi) {
        ASSERT_LT(lo, hi);
        for (size_t k = lo; k < hi; ++k) hits[k].fetch_add(1);
      });
      for (size_t k = 0; k < n; ++k) EXPECT_EQ(hits[k].load(), 1) << "n " << n << " threads " << threads << " index " << k;
    }
  }
}

TEST(ParallelRanges, TheFirstFailingPartIsRethrownAfterAllEnd) {
  std::atomic<int> ended{0};
  try {
    parallel_ranges(400, 4, [&](size_t lo, size_t) {
      ended.fetch_add(1);
      if (lo >= 200) throw std::runtime_error("part at " + std::to_string(lo));
    });
    FAIL() << "no exception";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()), "part at 200");
  }
  EXPECT_EQ(ended.load(), 4);
}

}  // namespace
}  // namespace parafab::worker
