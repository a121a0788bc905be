// Helpers shared by the worker/ data tests: a fresh temp folder per test,
// whole-file I/O, and catching a DataError's message.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>

#include "tests/common/temp_dir.h"
#include "worker/data_error.h"
#include "worker/dataset.h"

namespace parafab::worker::test {

using parafab::testing::TempDir;

inline void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(f.good()) << path;
}

inline std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

// The message of the DataError that f throws, or "" (and a test failure).
template <class F>
std::string data_error_of(F&& f) {
  try {
    f();
  } catch (const DataError& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected DataError, got another exception: " << e.what();
    return "";
  }
  ADD_FAILURE() << "expected a DataError, nothing was thrown";
  return "";
}

// Exact, element-wise equality of two views (floats compared bitwise).
inline void expect_same_view(const DatasetView& a, const DatasetView& b) {
  ASSERT_EQ(a.labels.size(), b.labels.size());
  ASSERT_EQ(a.row_ptr.size(), b.row_ptr.size());
  ASSERT_EQ(a.keys.size(), b.keys.size());
  ASSERT_EQ(a.values.size(), b.values.size());
  // memcmp must not see the null data() of an empty span.
  auto same = [](const auto& x, const auto& y) {
    return x.empty() || std::memcmp(x.data(), y.data(), x.size_bytes()) == 0;
  };
  EXPECT_TRUE(same(a.labels, b.labels));
  EXPECT_TRUE(same(a.row_ptr, b.row_ptr));
  EXPECT_TRUE(same(a.keys, b.keys));
  EXPECT_TRUE(same(a.values, b.values));
}

}  // namespace parafab::worker::test
