// What a table is: the same description on every server and worker, carried
// in the cluster map.
//
//   ps::TableSchema t{.id = 0, .kind = ps::TableKind::kSparse, .width = 1};
//   t.updater.kind = ps::UpdaterKind::kAdaGrad;
//   t.validate();
#pragma once

#include <cstdint>
#include <string>

#include "ps/updater.h"

namespace parafab::ps {

enum class TableKind : uint8_t {
  kSparse,  // keys are hashed uint64 feature ids; an open-addressing hash table per server
  kDense,   // keys are indices [0, rows); a contiguous array, range-partitioned
};

enum class InitializerKind : uint8_t {
  kZeros,
  kNormal,  // N(0, stddev^2), drawn from a stream seeded by (seed, key): every server agrees
};

struct Initializer {
  InitializerKind kind = InitializerKind::kZeros;
  float stddev = 0.01f;
  uint64_t seed = 0;
};

struct TableSchema {
  uint32_t id = 0;
  TableKind kind = TableKind::kSparse;
  uint32_t width = 1;     // floats per key
  uint64_t rows = 0;      // dense tables: number of keys (indices); sparse: unused
  Initializer init;
  UpdaterConfig updater;

  // Throws std::invalid_argument naming the table and the bad field.
  void validate() const;
};

// Server i of S holds rows [i*rows/S, (i+1)*rows/S) of a dense table.
struct RowRange {
  uint64_t begin = 0;
  uint64_t end = 0;
};
RowRange dense_rows_of(uint64_t rows, uint32_t server, uint32_t servers);

// Fills value[0, width) with the initial value of `key` under `init`. The
// same (init, key) gives the same floats on every machine.
void initialize_value(const Initializer& init, uint64_t key, float* value, uint32_t width);

}  // namespace parafab::ps
