// The fuzz targets' invariant checks: a violated one aborts, so libFuzzer
// reports it as a crash and keeps the input.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <span>

namespace parafab::fuzz {

[[noreturn]] inline void violated(const char* what) {
  std::fprintf(stderr, "fuzz invariant violated: %s\n", what);
  std::abort();
}
inline void check(bool ok, const char* what) {
  if (!ok) violated(what);
}

// Bitwise equality of two arrays (so a NaN equals itself). An empty one may
// have a null data(), which memcmp must never see.
template <typename T>
bool bytes_equal(std::span<const T> x, std::span<const T> y) {
  return x.size() == y.size() && (x.empty() || std::memcmp(x.data(), y.data(), x.size_bytes()) == 0);
}

}  // namespace parafab::fuzz
