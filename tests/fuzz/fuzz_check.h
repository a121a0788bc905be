// The fuzz targets' invariant checks: a violated one aborts, so libFuzzer
// reports it as a crash and keeps the input.
#pragma once

#include <cstdio>
#include <cstdlib>

namespace parafab::fuzz {

[[noreturn]] inline void violated(const char* what) {
  std::fprintf(stderr, "fuzz invariant violated: %s\n", what);
  std::abort();
}
inline void check(bool ok, const char* what) {
  if (!ok) violated(what);
}

}  // namespace parafab::fuzz
