// Runs a loop over [0, n) on several threads: the range is split into
// `threads` contiguous parts, the first run by the caller, the others by
// threads of their own; returns when every part is done.
//
//   worker::parallel_ranges(cols.size(), threads, [&](size_t lo, size_t hi) {
//     for (size_t k = lo; k < hi; ++k) out[k] = f(cols[k]);
//   });
//
// A part that throws does not stop the others; the first part's exception
// (in range order) is rethrown to the caller once all have ended.
#pragma once

#include <algorithm>
#include <cstddef>
#include <exception>
#include <thread>
#include <vector>

namespace parafab::worker {

template <typename Body>
void parallel_ranges(size_t n, int threads, const Body& body) {
  const auto parts = static_cast<size_t>(std::max(1, threads));
  std::vector<std::exception_ptr> errors(parts);
  auto run = [&](size_t p) {
    try {
      const size_t lo = n * p / parts, hi = n * (p + 1) / parts;
      if (lo < hi) body(lo, hi);
    } catch (...) {
      errors[p] = std::current_exception();
    }
  };
  std::vector<std::thread> pool;
  pool.reserve(parts - 1);
  for (size_t p = 1; p < parts; ++p) pool.emplace_back(run, p);
  run(0);
  for (auto& t : pool) t.join();
  for (const auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

}  // namespace parafab::worker
