#include "worker/feature_hashing.h"

#include <gtest/gtest.h>
#include <xxhash.h>

#include <unordered_set>

namespace parafab::worker {
namespace {

TEST(FeatureHashing, Mix64IsSplitmix64Finalizer) {
  // splitmix64 seeded with 0 first adds the golden gamma, then finalizes; its
  // first output is the published 0xe220a8397b1dcdaf.
  static_assert(mix64(0x9e3779b97f4a7c15ULL) == 0xe220a8397b1dcdafULL);
  EXPECT_EQ(mix64(0), 0u);
}

TEST(FeatureHashing, HashTokenIsXxh64SeededWithNamespace) {
  EXPECT_EQ(hash_token(0, ""), XXH64("", 0, 0));
  EXPECT_EQ(hash_token(0, ""), 0xef46db3751d8e999ULL);  // xxHash64 of "" with seed 0
  EXPECT_EQ(hash_token(7, "68fd1e64"), XXH64("68fd1e64", 8, 7));
  EXPECT_NE(hash_token(7, "68fd1e64"), hash_token(8, "68fd1e64"));
  EXPECT_NE(hash_token(7, "a"), hash_token(7, "b"));
}

TEST(FeatureHashing, NamespacesDoNotCollideOnSmallValues) {
  std::unordered_set<uint64_t> seen;
  for (uint32_t ns = 0; ns < 40; ++ns) {
    for (uint64_t v = 0; v < 5000; ++v) {
      EXPECT_TRUE(seen.insert(hash_feature(ns, v)).second) << "ns " << ns << " value " << v;
    }
  }
}

TEST(FeatureHashing, TheTopByteIsTheNamespace) {
  for (uint32_t ns : {0u, 1u, 13u, 14u, 39u, 255u}) {
    for (uint64_t v : {uint64_t{0}, uint64_t{1}, uint64_t{0x68fd1e64}, ~uint64_t{0}}) {
      EXPECT_EQ(feature_namespace(hash_feature(ns, v)), ns) << "ns " << ns << " value " << v;
    }
  }
  EXPECT_EQ(feature_namespace(123456), 0u);  // a libsvm index
}

TEST(FeatureHashing, IsConstexprAndDeterministic) {
  constexpr uint64_t k = hash_feature(14, 0x68fd1e64);
  EXPECT_EQ(k, hash_feature(14, 0x68fd1e64));
  EXPECT_NE(k, hash_feature(15, 0x68fd1e64));
}

}  // namespace
}  // namespace parafab::worker
