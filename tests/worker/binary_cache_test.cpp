// The binary cache: exact round trip, staleness, and refusal of every kind
// of damage with a message that says which.
#include "worker/binary_cache.h"

#include <gtest/gtest.h>
#include <xxhash.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <string>

#include "tests/worker/test_util.h"
#include "worker/data_reader.h"

namespace parafab::worker {
namespace {

using test::data_error_of;
using test::expect_same_view;
namespace fs = std::filesystem;

// Every value distinct, an odd row count and nnz (so both padding gaps exist).
Dataset sample(size_t rows) {
  DatasetArrays a;
  uint64_t key = 0x1234;
  for (size_t i = 0; i < rows; ++i) {
    a.labels.push_back(static_cast<float>(i % 2));
    for (size_t k = 0; k < i % 5; ++k) {
      a.keys.push_back(key = key * 6364136223846793005ULL + 1442695040888963407ULL);
      a.values.push_back(static_cast<float>(a.values.size()) + 0.25f);
    }
    a.row_ptr.push_back(a.keys.size());
  }
  return Dataset(std::move(a));
}

void patch(const std::string& path, size_t offset, const void* bytes, size_t n) {
  std::string s = test::read_file(path);
  ASSERT_LE(offset + n, s.size());
  std::memcpy(s.data() + offset, bytes, n);
  test::write_file(path, s);
}

void flip_byte(const std::string& path, size_t offset) {
  std::string s = test::read_file(path);
  ASSERT_LT(offset, s.size());
  s[offset] = static_cast<char>(s[offset] ^ 0x10);
  test::write_file(path, s);
}

// Rewrites the header's checksum so that a forged field passes it.
void rehash_header(const std::string& path) {
  std::string s = test::read_file(path);
  const uint64_t h = XXH64(s.data(), 64, 0);
  std::memcpy(s.data() + 64, &h, 8);
  test::write_file(path, s);
}

class BinaryCache : public ::testing::Test {
 protected:
  test::TempDir dir_;
  std::string cache_ = dir_.file("data.pfc");
  SourceStamp stamp_{12345, 987654321012345678};
};

TEST_F(BinaryCache, RoundTripIsExact) {
  for (size_t rows : {size_t{0}, size_t{1}, size_t{7}, size_t{1001}}) {
    SCOPED_TRACE(rows);
    Dataset d = sample(rows);
    write_binary_cache(cache_, d, stamp_);
    SourceStamp got;
    Dataset back = open_binary_cache(cache_, &got);
    EXPECT_EQ(got, stamp_);
    expect_same_view(d.view(), back.view());
    const uint64_t want_size = 72 + ((rows * 4 + 7) / 8) * 8 + (rows + 1) * 8 + d.nnz() * 8 + ((d.nnz() * 4 + 7) / 8) * 8;
    EXPECT_EQ(fs::file_size(cache_), want_size);
  }
  // Only the cache is left: the temp file was renamed.
  size_t files = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir_.path())) ++files;
  EXPECT_EQ(files, 1u);
}

TEST_F(BinaryCache, MappingOutlivesTheFileAndTheFirstHandle) {
  Dataset d = sample(50);
  write_binary_cache(cache_, d, stamp_);
  Dataset copy;
  {
    Dataset mapped = open_binary_cache(cache_);
    copy = mapped;
  }
  fs::remove(cache_);
  expect_same_view(d.view(), copy.view());
}

TEST_F(BinaryCache, RewritingOverAMappedCacheIsSafe) {
  Dataset d = sample(30);
  write_binary_cache(cache_, d, stamp_);
  Dataset mapped = open_binary_cache(cache_);
  write_binary_cache(cache_, sample(3), stamp_);  // the old mapping keeps the old inode
  expect_same_view(d.view(), mapped.view());
  EXPECT_EQ(open_binary_cache(cache_).rows(), 3u);
}

TEST_F(BinaryCache, RefusesBadMagic) {
  write_binary_cache(cache_, sample(10), stamp_);
  patch(cache_, 0, "XFAB", 4);
  EXPECT_EQ(data_error_of([&] { open_binary_cache(cache_); }),
            cache_ + ": bad magic: not a parafab binary cache (expected \"PFABCSH1\")");
}

TEST_F(BinaryCache, RefusesOtherVersion) {
  write_binary_cache(cache_, sample(10), stamp_);
  const uint32_t v = 1;
  patch(cache_, 8, &v, 4);
  EXPECT_EQ(data_error_of([&] { open_binary_cache(cache_); }),
            cache_ + ": unsupported cache format version 1 (this build reads version 3)");
}

TEST_F(BinaryCache, RefusesTruncatedFiles) {
  write_binary_cache(cache_, sample(10), stamp_);
  const auto size = fs::file_size(cache_);
  fs::resize_file(cache_, size - 4);
  std::string msg = data_error_of([&] { open_binary_cache(cache_); });
  EXPECT_EQ(msg.rfind(cache_ + ": truncated cache: the header describes 10 rows", 0), 0u) << msg;
  fs::resize_file(cache_, 30);
  msg = data_error_of([&] { open_binary_cache(cache_); });
  EXPECT_EQ(msg, cache_ + ": truncated cache: 30 bytes, less than the 72-byte header");
  fs::resize_file(cache_, 0);
  msg = data_error_of([&] { open_binary_cache(cache_); });
  EXPECT_EQ(msg, cache_ + ": truncated cache: 0 bytes, less than the 72-byte header");
}

TEST_F(BinaryCache, RefusesTrailingBytes) {
  write_binary_cache(cache_, sample(10), stamp_);
  fs::resize_file(cache_, fs::file_size(cache_) + 8);
  const std::string msg = data_error_of([&] { open_binary_cache(cache_); });
  EXPECT_NE(msg.find("cache size mismatch"), std::string::npos) << msg;
}

TEST_F(BinaryCache, RefusesFlippedPayloadBytes) {
  Dataset d = sample(20);
  write_binary_cache(cache_, d, stamp_);
  const auto size = fs::file_size(cache_);
  for (size_t offset : {size_t{72}, size_t{72 + 80 + 3}, static_cast<size_t>(size - 1)}) {
    SCOPED_TRACE(offset);
    write_binary_cache(cache_, d, stamp_);
    flip_byte(cache_, offset);
    EXPECT_EQ(data_error_of([&] { open_binary_cache(cache_); }),
              cache_ + ": payload checksum mismatch: the cache data is corrupt");
  }
}

TEST_F(BinaryCache, RefusesFlippedHeaderBytes) {
  Dataset d = sample(20);
  for (size_t offset : {size_t{12}, size_t{16}, size_t{24}, size_t{33}, size_t{40}, size_t{48}, size_t{52},
                        size_t{60}, size_t{68}}) {
    SCOPED_TRACE(offset);
    write_binary_cache(cache_, d, stamp_);
    flip_byte(cache_, offset);
    EXPECT_EQ(data_error_of([&] { open_binary_cache(cache_); }),
              cache_ + ": header checksum mismatch: the cache header is corrupt");
  }
}

TEST_F(BinaryCache, RefusesEverySingleByteFlip) {
  Dataset d = sample(9);
  write_binary_cache(cache_, d, stamp_);
  const std::string good = test::read_file(cache_);
  for (size_t i = 0; i < good.size(); ++i) {
    std::string bad = good;
    bad[i] = static_cast<char>(bad[i] ^ (1 << (i % 8)));
    test::write_file(cache_, bad);
    const std::string msg = data_error_of([&] { open_binary_cache(cache_); });
    EXPECT_EQ(msg.rfind(cache_ + ": ", 0), 0u) << "byte " << i << ": " << msg;
  }
}

TEST_F(BinaryCache, RefusesForgedSizesBeforeTouchingMemory) {
  write_binary_cache(cache_, sample(20), stamp_);
  const uint64_t huge = uint64_t{1} << 62;
  patch(cache_, 16, &huge, 8);  // rows
  rehash_header(cache_);
  std::string msg = data_error_of([&] { open_binary_cache(cache_); });
  EXPECT_NE(msg.find("truncated cache"), std::string::npos) << msg;

  write_binary_cache(cache_, sample(20), stamp_);
  const uint64_t big_nnz = 1'000'000;
  patch(cache_, 24, &big_nnz, 8);  // nnz
  rehash_header(cache_);
  msg = data_error_of([&] { open_binary_cache(cache_); });
  EXPECT_NE(msg.find("truncated cache"), std::string::npos) << msg;
}

TEST_F(BinaryCache, RefusesInconsistentRowOffsetsEvenWithValidChecksums) {
  Dataset d = sample(6);
  write_binary_cache(cache_, d, stamp_);
  // row_ptr[2] sits at 72 + align8(6 * 4) + 2 * 8.
  const uint64_t wild = 1000;
  patch(cache_, 72 + 24 + 16, &wild, 8);
  std::string s = test::read_file(cache_);
  const uint64_t ph = XXH64(s.data() + 72, s.size() - 72, 0);
  patch(cache_, 56, &ph, 8);
  rehash_header(cache_);
  const std::string msg = data_error_of([&] { open_binary_cache(cache_); });
  EXPECT_NE(msg.find("inconsistent cache: row offsets decrease at row 2"), std::string::npos) << msg;
}

TEST_F(BinaryCache, MissingFileAndWriteFailures) {
  std::string msg = data_error_of([&] { open_binary_cache(dir_.file("nope.pfc")); });
  EXPECT_NE(msg.find("cannot open cache"), std::string::npos) << msg;
  const std::string bad_dir = dir_.file("no/such/dir/x.pfc");
  msg = data_error_of([&] { write_binary_cache(bad_dir, sample(3), stamp_); });
  EXPECT_EQ(msg.rfind(bad_dir + ": cannot create temp file for cache", 0), 0u) << msg;
  msg = data_error_of([&] { source_stamp(dir_.file("nope.svm")); });
  EXPECT_NE(msg.find("cannot stat"), std::string::npos) << msg;
}

TEST_F(BinaryCache, RefusesToWriteAnInconsistentDataset) {
  static const float labels[2] = {1, 0};
  static const uint64_t row_ptr[3] = {0, 1, 5};
  static const uint64_t keys[1] = {3};
  static const float values[1] = {1};
  Dataset bad(DatasetView{labels, row_ptr, keys, values}, nullptr);
  const std::string msg = data_error_of([&] { write_binary_cache(cache_, bad, stamp_); });
  EXPECT_NE(msg.find("inconsistent dataset"), std::string::npos) << msg;
}

TEST_F(BinaryCache, LoadDatasetUsesAFreshCacheAndRebuildsAStaleOne) {
  const std::string src = dir_.file("train.svm");
  test::write_file(src, "1 1:1 2:2\n0 3:3\n");
  ReadOptions opt;
  bool from_cache = true;
  ReadStats stats;
  std::string why = "not set";
  Dataset first = load_dataset(src, opt, cache_, &stats, &from_cache, &why);
  EXPECT_FALSE(from_cache);
  EXPECT_EQ(why, "");  // no cache yet: built, nothing to explain
  EXPECT_EQ(first.rows(), 2u);
  EXPECT_TRUE(fs::exists(cache_));

  Dataset second = load_dataset(src, opt, cache_, &stats, &from_cache, &why);
  EXPECT_TRUE(from_cache);
  EXPECT_EQ(why, "");
  EXPECT_EQ(stats.examples, 2u);
  expect_same_view(first.view(), second.view());

  // Size changes: stale.
  test::write_file(src, "1 1:1 2:2\n0 3:3\n1 4:4\n");
  Dataset third = load_dataset(src, opt, cache_, &stats, &from_cache, &why);
  EXPECT_FALSE(from_cache);
  EXPECT_EQ(why, src + " changed since it was built");
  EXPECT_EQ(third.rows(), 3u);
  load_dataset(src, opt, cache_, &stats, &from_cache, &why);
  EXPECT_TRUE(from_cache);
  EXPECT_EQ(why, "");

  // Same size, other mtime: stale too.
  test::write_file(src, "1 1:1 2:2\n0 3:3\n1 4:5\n");
  fs::last_write_time(src, fs::last_write_time(src) + std::chrono::seconds(5));
  Dataset fourth = load_dataset(src, opt, cache_, &stats, &from_cache, &why);
  EXPECT_FALSE(from_cache);
  EXPECT_EQ(why, src + " changed since it was built");
  EXPECT_EQ(fourth.view().values[3], 5.0f);
  SourceStamp recorded;
  open_binary_cache(cache_, &recorded);
  EXPECT_EQ(recorded, source_stamp(src));

  // A damaged cache is rebuilt, not trusted and not fatal, and the caller
  // learns which check it failed.
  flip_byte(cache_, fs::file_size(cache_) - 1);
  Dataset fifth = load_dataset(src, opt, cache_, &stats, &from_cache, &why);
  EXPECT_FALSE(from_cache);
  EXPECT_EQ(why, "it cannot be used: payload checksum mismatch: the cache data is corrupt");
  expect_same_view(fourth.view(), fifth.view());
  load_dataset(src, opt, cache_, &stats, &from_cache, &why);
  EXPECT_TRUE(from_cache);
  EXPECT_EQ(why, "");

  // No cache path: always parse.
  load_dataset(src, opt, "", &stats, &from_cache);
  EXPECT_FALSE(from_cache);
}

// --cache naming the data file, or any other file that is not a cache (a
// test set, a model), is refused and the file left as it was; an empty
// file is a cache to be.
TEST_F(BinaryCache, LoadDatasetNeverReplacesAFileThatIsNotACache) {
  const std::string src = dir_.file("train.svm");
  const std::string text = "1 1:1 2:2\n0 3:3\n";
  test::write_file(src, text);
  std::string msg = data_error_of([&] { load_dataset(src, {}, src); });
  EXPECT_EQ(msg, src + ": the cache path is the data file " + src + " itself; give the cache a path of its own");
  EXPECT_EQ(test::read_file(src), text);
  const std::string other = dir_.file("test.svm");
  test::write_file(other, "0 5:1\n");
  msg = data_error_of([&] { load_dataset(src, {}, other); });
  EXPECT_NE(msg.find(other + ": this file is not a parafab binary cache, so it is not replaced"), std::string::npos)
      << msg;
  EXPECT_EQ(test::read_file(other), "0 5:1\n");
  test::write_file(cache_, "");
  bool from_cache = true;
  EXPECT_EQ(load_dataset(src, {}, cache_, nullptr, &from_cache).rows(), 2u);
  EXPECT_FALSE(from_cache);
  EXPECT_TRUE(load_dataset(src, {}, cache_, nullptr, &from_cache).rows() == 2u && from_cache);
  // A cache of another version is still a cache: rebuilt.
  const uint32_t old_version = 1;
  patch(cache_, 8, &old_version, 4);
  std::string why;
  EXPECT_EQ(load_dataset(src, {}, cache_, nullptr, &from_cache, &why).rows(), 2u);
  EXPECT_FALSE(from_cache);
  EXPECT_NE(why.find("version 1"), std::string::npos) << why;
}

// The cache records how its labels were read (--classes): a run that reads
// them otherwise parses the text again (a dnn's class ids are not an lr's
// binary labels), and says why.
TEST_F(BinaryCache, LoadDatasetRebuildsACacheOfAnotherLabelMode) {
  const std::string src = dir_.file("digits.svm");
  test::write_file(src, "2 1:1\n0 2:1\n1 3:1\n");
  ReadOptions k3;
  k3.classes = 3;
  bool from_cache = true;
  std::string why;
  Dataset d = load_dataset(src, k3, cache_, nullptr, &from_cache, &why);
  EXPECT_EQ(d.view().labels[0], 2.0f);
  uint32_t classes = 0;
  open_binary_cache(cache_, nullptr, nullptr, &classes);
  EXPECT_EQ(classes, 3u);
  // Read as binary labels now: label 2 is no binary label, as without a cache.
  const std::string msg = data_error_of([&] { load_dataset(src, {}, cache_, nullptr, &from_cache, &why); });
  EXPECT_NE(msg.find(src + ":1:"), std::string::npos) << msg;
  test::write_file(src, "1 1:1\n0 2:1\n1 3:1\n");
  d = load_dataset(src, k3, cache_, nullptr, &from_cache, &why);
  EXPECT_TRUE(d.rows() == 3u && !from_cache);
  d = load_dataset(src, {}, cache_, nullptr, &from_cache, &why);
  EXPECT_FALSE(from_cache);
  EXPECT_EQ(why, "it was built reading labels as 3 class ids and this run reads binary labels");
  EXPECT_TRUE(load_dataset(src, {}, cache_, nullptr, &from_cache).rows() == 3u && from_cache);
}

TEST_F(BinaryCache, LoadDatasetPropagatesParseErrorsAndWritesNoCache) {
  const std::string src = dir_.file("bad.svm");
  test::write_file(src, "1 1:1\n1 x:1\n");
  const std::string msg = data_error_of([&] { load_dataset(src, {}, cache_); });
  EXPECT_EQ(msg, src + ":2:3: bad feature index in 'x:1'");
  EXPECT_FALSE(fs::exists(cache_));
}

}  // namespace
}  // namespace parafab::worker
