// `parafab bench kernels`: throughput of the kernels/ entry points on a
// synthetic sparse batch in backend memory, each figure beside the memory-copy
// ceiling measured in the same run.
//
//   KernelBenchOptions o;              // defaults fit a 2-core host in ~10 s
//   o.json_path = "bench_kernels.json";
//   int rc = run_kernel_bench(o, std::cout);   // table on stdout, JSON lines to the file
//
// The batch: `rows` rows of about `nnz_per_row` nonzeros (uniform in
// [nnz/2, 3 nnz/2]), slots drawn with log-uniform ranks (a Zipf-like law of
// exponent 1: the top 0.1% of 2^20 slots take half of the nonzeros) and
// scattered over [0, slots) by a multiplicative bijection, as hashed features
// are. The run warms up, verifies the gradient once against a float64 host
// reference (a mismatch fails the run), then times `repeats` calls of each
// kernel and reports the best. The gradient also runs on the same nonzeros
// as binary features (no values array) and on a batch over `local_slots`.
#pragma once

#include <cstddef>
#include <cstdint>
#include <ostream>
#include <string>

namespace parafab::benchmarks {

struct KernelBenchOptions {
  int threads = 2;                   // host threads (OpenMP backend; the ceiling uses as many)
  int64_t rows = 200'000;            // rows of the batch
  int nnz_per_row = 40;              // mean nonzeros per row
  int64_t slots = int64_t{1} << 20;  // model slots, <= 2^32
  // Slots of the further gradient case "_local": a batch of the same shape
  // drawn over this many slots, as when a worker renumbers the keys its batch
  // touches densely. Run only when 2 <= local_slots < slots.
  int64_t local_slots = int64_t{1} << 16;
  int repeats = 5;                   // timed calls per kernel, best reported
  std::string json_path;             // JSON lines written here when not empty
  uint64_t seed = 42;
  size_t ceiling_buffer_bytes = 0;  // host memcpy buffers; 0: 4x the last-level cache
};

// Runs the benchmark, prints the table to `out`. Returns 0 on success,
// 1 when the verification fails, 2 on bad options or an error (message on `out`).
int run_kernel_bench(const KernelBenchOptions& options, std::ostream& out);

}  // namespace parafab::benchmarks
