// Compaction of duplicate keys in a gradient: sort by key, sum the rows of
// duplicates (sort + reduce_by_key). Workers run it before a push so every key
// travels once.
//
//   size_t u = kernels::compact_keys(keys, vals, n, width, out_keys, out_vals);
//   // out_keys[0, u) ascending and unique; out_vals[k*width + c] = sum of the
//   // vals rows whose key is out_keys[k].
#pragma once

#include <cstddef>
#include <cstdint>

namespace parafab::kernels {

// keys: n keys; vals: n rows of width floats (row-major). out_keys must hold n
// keys and out_vals n*width floats (the worst case: no duplicates). Inputs are
// not modified. Returns the number of unique keys. width must be >= 1.
[[nodiscard]] size_t compact_keys(const uint64_t* keys, const float* vals, size_t n, int width,
                                  uint64_t* out_keys, float* out_vals);

}  // namespace parafab::kernels
